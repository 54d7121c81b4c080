/** A server-sent-events parser (the WHATWG "event stream" rules): feed it decoded text as
 * it arrives, get back the complete events. `lastEventId` and `retry` follow the stream. */
export class SseParser {
  constructor() {
    this.buffer = '';
    this.type = '';
    this.data = [];
    this.lastEventId = null;
    this.retry = null;
    this.started = false;
    this.skipLf = false; // the previous chunk ended in "\r", which may be half of "\r\n"
  }

  /** @returns {{type: string, data: string, id: string|null}[]} */
  feed(text) {
    let chunk = text;
    if (!this.started && chunk) {
      this.started = true;
      if (chunk.charCodeAt(0) === 0xfeff) chunk = chunk.slice(1);
    }
    if (this.skipLf && chunk) {
      if (chunk[0] === '\n') chunk = chunk.slice(1);
      this.skipLf = false;
    }
    const events = [];
    const buf = this.buffer + chunk;
    let start = 0;
    for (let i = 0; i < buf.length; i++) {
      const ch = buf[i];
      if (ch !== '\n' && ch !== '\r') continue;
      this.line(buf.slice(start, i), events);
      if (ch === '\r') {
        if (i + 1 === buf.length) this.skipLf = true;
        else if (buf[i + 1] === '\n') i++;
      }
      start = i + 1;
    }
    this.buffer = buf.slice(start);
    return events;
  }

  line(line, events) {
    if (line === '') {
      if (this.data.length) events.push({ type: this.type || 'message', data: this.data.join('\n'), id: this.lastEventId });
      this.type = '';
      this.data = [];
      return;
    }
    if (line[0] === ':') return; // a comment (the server's heartbeat)
    const colon = line.indexOf(':');
    const field = colon < 0 ? line : line.slice(0, colon);
    let value = colon < 0 ? '' : line.slice(colon + 1);
    if (value[0] === ' ') value = value.slice(1);
    if (field === 'event') this.type = value;
    else if (field === 'data') this.data.push(value);
    else if (field === 'id' && !value.includes('\0')) this.lastEventId = value;
    else if (field === 'retry' && /^\d+$/.test(value)) this.retry = Number(value);
  }
}
