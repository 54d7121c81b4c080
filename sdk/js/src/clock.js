/** The real clock. Tests pass their own `{now, setTimeout, clearTimeout}` to `init`. */
export const systemClock = {
  now: () => Date.now(),
  setTimeout: (fn, ms) => setTimeout(fn, ms),
  clearTimeout: (handle) => clearTimeout(handle),
};
