/** The real service for the SDK's tests: `cs serve` in the embedded mode (SQLite and the
 * in-process worker) on a free loopback port, with a fresh data directory, and the `cs`
 * command for tenants and keys. */
import { execFile, spawn } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';

const ROOT = resolve(dirname(fileURLToPath(import.meta.url)), '..', '..', '..');
export const CS = process.env.CS_BIN ?? join(ROOT, '.venv', 'bin', 'cs');
// Settings the service reads: the test passes exactly the ones it means (as tests/support/processes.py).
const SERVICE_VARS = /^(CS_.*|DATABASE_URL|REDIS_URL|SMTP_.*|MAIL_FROM|OPENAI_.*|STRIPE_.*|ALLOW_PRIVATE_WEBHOOK_URLS|COLUMNS|LINES|FORCE_COLOR|TTY_COMPATIBLE|TTY_INTERACTIVE)$/;
const run = promisify(execFile);

export async function startService({ startTimeout = 30000 } = {}) {
  const dataDir = mkdtempSync(join(tmpdir(), 'cs-sdk-'));
  const env = Object.fromEntries(Object.entries(process.env).filter(([k]) => !SERVICE_VARS.test(k)));
  env.CS_DATA_DIR = dataDir;
  const proc = spawn(CS, ['serve', '--host', '127.0.0.1', '--port', '0'], { env, stdio: ['ignore', 'pipe', 'pipe'] });
  let stderr = '';
  proc.stderr.on('data', (d) => { stderr = (stderr + d).slice(-4000); });
  const url = await servingUrl(proc, startTimeout, () => stderr);
  return new Service(proc, url, dataDir, env);
}

function servingUrl(proc, timeout, stderr) {
  return new Promise((resolve, reject) => {
    let out = '';
    const fail = (why) => reject(new Error(`cs serve ${why}\n--- stdout ---\n${out}\n--- stderr ---\n${stderr()}`));
    const timer = setTimeout(() => fail(`printed no URL in ${timeout} ms`), timeout);
    proc.stdout.on('data', (d) => {
      out += d;
      const m = /serving on (http:\/\/[\d.]+:\d+)/.exec(out);
      if (m) {
        clearTimeout(timer);
        resolve(m[1]);
      }
    });
    proc.on('exit', (code) => { clearTimeout(timer); fail(`exited with ${code}`); });
  });
}

class Service {
  constructor(proc, url, dataDir, env) {
    Object.assign(this, { proc, url, dataDir, env });
  }

  /** Runs `cs ARGS --json` against the same data and returns its JSON document. */
  async cs(...args) {
    const { stdout } = await run(CS, [...args, '--json'], { env: this.env });
    return JSON.parse(stdout);
  }

  /** A tenant (made by `cs tenant create`) with its admin `full` key, and an editor key
   * with only `ingest`, a browser's, issued through the API. */
  async tenant(name, plan = 'trial') {
    const made = await this.cs('tenant', 'create', name, '--owner-email', `owner@${name.toLowerCase()}.example`, '--plan', plan);
    const ingest = await this.api('POST', '/api/settings/api-keys', made.api_key,
      { label: 'sdk', role: 'editor', permissions: ['ingest'] });
    if (ingest.status !== 201) throw new Error(`issuing an ingest key: ${JSON.stringify(ingest)}`);
    return { id: made.tenant_id, adminKey: made.api_key, ingestKey: ingest.body.api_key };
  }

  /** One API call with a key; returns `{status, body}`. */
  async api(method, path, key, body) {
    const response = await fetch(this.url + path, {
      method,
      headers: { Authorization: `Bearer ${key}`, ...(body ? { 'Content-Type': 'application/json' } : {}) },
      body: body ? JSON.stringify(body) : undefined,
    });
    return { status: response.status, body: await response.json() };
  }

  async stop() {
    if (this.proc.exitCode == null) {
      const exited = new Promise((resolve) => this.proc.once('exit', resolve));
      this.proc.kill('SIGTERM');
      const timer = setTimeout(() => this.proc.kill('SIGKILL'), 10000);
      await exited;
      clearTimeout(timer);
    }
    rmSync(this.dataDir, { recursive: true, force: true });
  }
}
