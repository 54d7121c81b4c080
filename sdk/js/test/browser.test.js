// The bundled SDK in headless Chromium (Debian's `chromium`, driven by playwright-core)
// on a page of another origin than the service: its events arrive through CORS, the
// queue goes out with sendBeacon (key in ?api_key=, text/plain) when the page is left,
// and onMessage reads the in-app stream with the browser's own fetch.
import assert from 'node:assert/strict';
import { existsSync } from 'node:fs';
import http from 'node:http';
import { after, before, test } from 'node:test';

import { chromium } from 'playwright-core';

import { bundle } from '../scripts/bundle.mjs';
import { startProxy } from '../testing/proxy.js';
import { startService } from '../testing/service.js';
import { until } from '../testing/wait.js';

const CHROMIUM = process.env.CHROMIUM_PATH ?? '/usr/bin/chromium';
const missing = existsSync(CHROMIUM)
  ? false : `chromium not found at ${CHROMIUM}: run sdk/js/scripts/ensure-browser.sh (or set CHROMIUM_PATH)`;

const PAGE = `<!doctype html><meta charset="utf-8"><title>shop</title>
<script type="module">
  import * as cs from '/cs-sdk.js';
  window.cs = cs;
  window.messages = [];
  window.errors = [];
</script>`;

let service;
let proxy;
let site;
let browser;
let tenant;

before(async () => {
  if (missing) return;
  [service, browser] = await Promise.all([
    startService(),
    chromium.launch({ executablePath: CHROMIUM, args: ['--no-sandbox'] }),
  ]);
  tenant = await service.tenant('Shop');
  proxy = await startProxy(service.url);
  site = await serveSite();
});

after(async () => {
  await browser?.close();
  site?.close();
  await proxy?.close();
  await service?.stop();
});

/** The tenant's web site: the page and the one-file SDK, on its own origin. */
async function serveSite() {
  const code = bundle();
  const server = http.createServer((req, res) => {
    const [type, body] = req.url === '/cs-sdk.js' ? ['text/javascript', code] : ['text/html', PAGE];
    res.writeHead(200, { 'Content-Type': type });
    res.end(body);
  });
  await new Promise((resolve) => server.listen(0, '127.0.0.1', resolve));
  server.url = `http://127.0.0.1:${server.address().port}/`;
  return server;
}

async function openPage() {
  const page = await browser.newPage();
  await page.goto(site.url);
  await page.waitForFunction(() => window.cs !== undefined);
  return page;
}

async function eventsOf(userId) {
  const { status, body } = await service.api('GET', `/api/customers/${userId}`, tenant.adminKey);
  return status === 200 ? body.events.map((e) => e.event).sort() : [];
}

test('a page on another origin tracks events that arrive at the service', { skip: missing }, async () => {
  const page = await openPage();
  const stats = await page.evaluate(async ({ apiKey, baseUrl }) => {
    cs.init({ apiKey, baseUrl, onError: (e) => window.errors.push(e.message) });
    cs.identify('b-user', { name: 'Browser Ada' });
    cs.setLocale(navigator.language);
    cs.track('opened_dashboard', { from: 'chromium' });
    await cs.flush();
    return cs.stats();
  }, { apiKey: tenant.ingestKey, baseUrl: proxy.url });
  assert.equal(stats.sent, 3);
  assert.deepEqual(await page.evaluate(() => window.errors), []);
  assert.deepEqual(await eventsOf('b-user'), ['$identify', '$locale', 'opened_dashboard']);
  const sent = proxy.tracks('b-user');
  assert.ok(sent.every((r) => r.headers.authorization === `Bearer ${tenant.ingestKey}`));
  await page.close();
});

test('leaving the page sends the queue with sendBeacon', { skip: missing }, async () => {
  const page = await openPage();
  await page.evaluate(({ apiKey, baseUrl }) => {
    cs.init({ apiKey, baseUrl, flushInterval: 600000 }); // only the page hide can send these
    cs.identify('b-beacon');
    cs.track('added_to_cart', { sku: 'A-1' });
    cs.track('started_checkout');
  }, { apiKey: tenant.ingestKey, baseUrl: proxy.url });
  assert.deepEqual(proxy.tracks('b-beacon'), []);
  await page.goto('about:blank');
  await until(async () => (await eventsOf('b-beacon')).length === 3, { what: 'the beaconed events' });
  assert.deepEqual(await eventsOf('b-beacon'), ['$identify', 'added_to_cart', 'started_checkout']);
  const [beacon] = proxy.tracks('b-beacon');
  assert.equal(beacon.path, `/api/track?api_key=${tenant.ingestKey}`);
  assert.match(beacon.headers['content-type'], /^text\/plain/);
  assert.equal(beacon.headers.authorization, undefined);
  await page.close();
});

test('onMessage in the browser gets an approved in-app message', { skip: missing }, async () => {
  const page = await openPage();
  await page.evaluate(async ({ apiKey, baseUrl }) => {
    cs.init({ apiKey, baseUrl });
    cs.identify('b-inapp');
    await cs.flush();
  }, { apiKey: tenant.ingestKey, baseUrl: proxy.url });
  const token = (await service.api('POST', '/api/in-app/tokens', tenant.adminKey, { user_id: 'b-inapp' })).body.token;
  const playbook = await service.api('POST', '/api/playbooks', tenant.adminKey, { name: 'Browser nudge' });
  const iv = await service.api('POST', '/api/interventions', tenant.adminKey,
    { user_id: 'b-inapp', playbook_id: playbook.body.id, channel: 'in_app', message_body: 'Hi from the service' });
  await service.api('PUT', `/api/interventions/${iv.body.id}/approve`, tenant.adminKey);
  await page.evaluate(({ apiKey, baseUrl, inAppToken }) => {
    cs.init({ apiKey, baseUrl, inAppToken });
    cs.onMessage((m) => window.messages.push(m));
  }, { apiKey: tenant.ingestKey, baseUrl: proxy.url, inAppToken: token });
  await page.waitForFunction(() => window.messages.length === 1, null, { timeout: 15000 });
  const [message] = await page.evaluate(() => window.messages);
  assert.equal(message.interventionId, iv.body.id);
  assert.equal(message.body, 'Hi from the service');
  await page.close();
});
