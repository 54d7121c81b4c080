/** A clock for the SDK's `clock` option that moves only when a test advances it. */
export class FakeClock {
  constructor(start = Date.now()) {
    this.t = start;
    this.timers = new Map();
    this.seq = 0;
  }

  now = () => this.t;

  setTimeout = (fn, ms) => {
    const id = ++this.seq;
    this.timers.set(id, { id, at: this.t + Math.max(0, Number(ms) || 0), fn });
    return id;
  };

  clearTimeout = (id) => {
    this.timers.delete(id);
  };

  /** Milliseconds until each pending timer fires, soonest first. */
  pending() {
    return this.sorted().map((timer) => timer.at - this.t);
  }

  /** Moves time on by `ms`, firing every timer that falls due on the way, in order. */
  advance(ms) {
    const end = this.t + ms;
    for (;;) {
      const next = this.sorted()[0];
      if (!next || next.at > end) break;
      this.timers.delete(next.id);
      this.t = next.at;
      next.fn();
    }
    this.t = end;
  }

  sorted() {
    return [...this.timers.values()].sort((a, b) => a.at - b.at || a.id - b.id);
  }
}
