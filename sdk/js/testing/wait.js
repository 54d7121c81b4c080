/** Waiting for real I/O (the service answering), not for the SDK's clock: polls a
 * condition until it holds, and fails with `what` after `timeout` ms. */
export async function until(condition, { timeout = 15000, what = 'condition' } = {}) {
  const end = Date.now() + timeout;
  for (;;) {
    const value = await condition();
    if (value) return value;
    if (Date.now() > end) throw new Error(`timed out after ${timeout} ms waiting for ${what}`);
    await new Promise((resolve) => setTimeout(resolve, 10));
  }
}
