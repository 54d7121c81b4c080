/** A small HTTP proxy in front of the real service that records what the SDK sends and,
 * when a test asks, answers a POST /api/track itself: an error before the service sees
 * it, the service's answer replaced by an error (the service stored the batch, the
 * client cannot know), or a dropped connection. Streams pass through and can be cut. */
import http from 'node:http';

export async function startProxy(target) {
  const proxy = new Proxy(new URL(target));
  await new Promise((resolve) => proxy.server.listen(0, '127.0.0.1', resolve));
  proxy.url = `http://127.0.0.1:${proxy.server.address().port}`;
  return proxy;
}

class Proxy {
  constructor(target) {
    this.target = target;
    this.requests = [];
    this.rules = [];
    this.streams = new Set();
    this.server = http.createServer((req, res) => this.handle(req, res));
  }

  /** The next POST /api/track gets `rule`: {status, headers?, body?} answered here,
   * {forward: true, status} forwarded then answered with `status`, or {destroy: true}. */
  once(rule) {
    this.rules.push(rule);
  }

  /** Recorded POST /api/track requests: {body, status, answer, userIds}. */
  tracks(userId) {
    return this.requests.filter((r) => r.method === 'POST' && r.path.startsWith('/api/track')
      && (userId === undefined || r.body?.events?.some((e) => e.user_id === userId)));
  }

  streamRequests() {
    return this.requests.filter((r) => r.path.startsWith('/api/in-app/stream'));
  }

  /** Drops every open stream, as a restarting server or a flaky network would. */
  cutStreams() {
    for (const socket of this.streams) socket.destroy();
    this.streams.clear();
  }

  async close() {
    this.cutStreams();
    this.server.closeAllConnections();
    await new Promise((resolve) => this.server.close(resolve));
  }

  async handle(req, res) {
    const raw = await readAll(req);
    const record = { method: req.method, path: req.url, headers: req.headers, body: parseJson(raw), status: null, answer: null };
    this.requests.push(record);
    const isTrack = req.method === 'POST' && req.url.startsWith('/api/track');
    const rule = isTrack ? this.rules.shift() : undefined;
    if (rule?.destroy) return void req.socket.destroy();
    if (rule && !rule.forward) return this.answer(res, record, rule);
    const upstream = await this.forward(req, raw);
    if (req.url.startsWith('/api/in-app/stream') && upstream.statusCode === 200) return this.pipe(upstream, res, record);
    const body = await readAll(upstream);
    record.answer = parseJson(body);
    if (rule) return this.answer(res, record, { status: rule.status, body: { error: 'proxy: answer replaced', code: 'internal' } });
    record.status = upstream.statusCode;
    res.writeHead(upstream.statusCode, upstream.headers);
    res.end(body);
  }

  answer(res, record, { status, headers = {}, body = { error: `proxy: ${status}`, code: 'internal' } }) {
    record.status = status;
    res.writeHead(status, { 'Content-Type': 'application/json', ...headers });
    res.end(JSON.stringify(body));
  }

  forward(req, raw) {
    return new Promise((resolve, reject) => {
      const upstream = http.request({
        host: this.target.hostname, port: this.target.port, method: req.method, path: req.url,
        headers: { ...req.headers, host: this.target.host },
      }, resolve);
      upstream.on('error', reject);
      upstream.end(raw);
    });
  }

  pipe(upstream, res, record) {
    record.status = 200;
    res.writeHead(200, upstream.headers);
    res.flushHeaders();
    this.streams.add(res.socket);
    res.socket.once('close', () => { this.streams.delete(res.socket); upstream.destroy(); });
    upstream.pipe(res);
  }
}

async function readAll(stream) {
  const chunks = [];
  for await (const chunk of stream) chunks.push(chunk);
  return Buffer.concat(chunks);
}

function parseJson(raw) {
  try {
    return raw.length ? JSON.parse(raw) : null;
  } catch {
    return null;
  }
}
