// onMessage against the real service's in-app stream (docs/channels.md, "In-app"): a message approved
// before the client connected and one approved after, resume with Last-Event-ID after a
// dropped connection, withdrawal on rollback, and a fresh token when one is refused.
import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';

import { createClient } from '../src/index.js';
import { FakeClock } from '../testing/fake-clock.js';
import { startProxy } from '../testing/proxy.js';
import { startService } from '../testing/service.js';
import { until } from '../testing/wait.js';

let service;
let proxy;
let tenant;
let playbookId;

before(async () => {
  service = await startService();
  tenant = await service.tenant('Crew', 'growth');
  proxy = await startProxy(service.url);
  const made = await service.api('POST', '/api/playbooks', tenant.adminKey, { name: 'Activation nudge' });
  assert.equal(made.status, 201, JSON.stringify(made.body));
  playbookId = made.body.id;
});

after(async () => {
  await proxy?.close();
  await service?.stop();
});

/** What the tenant's backend does: mint a stream token for one user. */
async function mintToken(userId) {
  const { status, body } = await service.api('POST', '/api/in-app/tokens', tenant.adminKey, { user_id: userId });
  assert.equal(status, 200, JSON.stringify(body));
  return body.token;
}

/** An in_app intervention created and approved through the API; the service's own worker delivers it. */
async function approve(userId, text) {
  const made = await service.api('POST', '/api/interventions', tenant.adminKey,
    { user_id: userId, playbook_id: playbookId, channel: 'in_app', message_body: text });
  assert.equal(made.status, 201, JSON.stringify(made.body));
  const approved = await service.api('PUT', `/api/interventions/${made.body.id}/approve`, tenant.adminKey);
  assert.equal(approved.status, 200, JSON.stringify(approved.body));
  return made.body.id;
}

/** The page: a client of an identified user (the user exists before a token is minted). */
async function identified(userId, options = {}) {
  const clock = new FakeClock();
  const errors = [];
  const client = createClient({ apiKey: tenant.ingestKey, baseUrl: proxy.url, clock, random: () => 0.5,
    onError: (err) => errors.push(err), ...options });
  client.identify(userId, { name: 'Ada' });
  await client.flush();
  return { client, clock, errors };
}

test('onMessage gets the message approved before it connected, then one approved after', async () => {
  let asked = 0;
  const { client } = await identified('u-app', { getInAppToken: () => { asked += 1; return mintToken('u-app'); } });
  const early = await approve('u-app', 'Welcome back: your dashboard is ready');
  const messages = [];
  client.onMessage((m) => messages.push(m));

  await until(() => messages.length === 1, { what: 'the message queued before connecting' });
  assert.equal(messages[0].event, 'intervention');
  assert.equal(messages[0].interventionId, early);
  assert.equal(messages[0].type, 'in_app');
  assert.equal(messages[0].body, 'Welcome back: your dashboard is ready');
  assert.equal(messages[0].playbookName, 'Activation nudge');
  assert.ok(!Number.isNaN(Date.parse(messages[0].timestamp)));
  assert.match(messages[0].id, /^\d+$/);

  const late = await approve('u-app', 'Try the new report builder');
  await until(() => messages.length === 2, { what: 'the message approved while connected' });
  assert.equal(messages[1].interventionId, late);
  assert.equal(messages[1].body, 'Try the new report builder');
  assert.equal(asked, 1, 'one token for one connection');
  await client.shutdown();
});

test('after a dropped stream it reconnects on its clock with Last-Event-ID; a rollback withdraws', async () => {
  await identified('u-app2');
  const { client, clock, errors } = await identified('u-app2', { inAppToken: await mintToken('u-app2') });
  const messages = [];
  client.onMessage((m) => messages.push(m));
  const first = await approve('u-app2', 'first');
  await until(() => messages.length === 1, { what: 'the first message' });

  proxy.cutStreams();
  await until(() => clock.pending().includes(3000), { what: 'a reconnect to be scheduled' });
  assert.deepEqual(clock.pending(), [3000], "after the stream's retry: 3000, and no idle watchdog left");
  const opened = proxy.streamRequests().length;
  clock.advance(3000);
  await until(() => proxy.streamRequests().length === opened + 1, { what: 'the reconnect' });
  assert.equal(proxy.streamRequests().at(-1).headers['last-event-id'], messages[0].id);

  const second = await approve('u-app2', 'second');
  await until(() => messages.length === 2, { what: 'a message after the resume' });
  assert.deepEqual(messages.map((m) => m.interventionId), [first, second], 'nothing twice');

  const rolled = await service.api('PUT', `/api/interventions/${second}/rollback`, tenant.adminKey, { reason: 'wrong user' });
  assert.equal(rolled.status, 200, JSON.stringify(rolled.body));
  await until(() => messages.length === 3, { what: 'the withdrawal' });
  // a withdrawal carries no id of its own: like EventSource, id is the stream's resume point
  assert.deepEqual(messages[2], { event: 'withdrawn', id: messages[1].id, interventionId: second });
  assert.deepEqual(errors, []);
  await client.shutdown();
});

test('a refused token is replaced through getInAppToken, at once', async () => {
  await identified('u-app3');
  const tokens = ['not-a-token', await mintToken('u-app3')];
  let asked = 0;
  const { client } = await identified('u-app3', { getInAppToken: async () => tokens[asked++] });
  const before = proxy.streamRequests().length;
  const messages = [];
  client.onMessage((m) => messages.push(m));
  const iv = await approve('u-app3', 'hello again');
  await until(() => messages.length === 1, { what: 'the message on the fresh token' });
  assert.equal(messages[0].interventionId, iv);
  assert.equal(asked, 2);
  assert.deepEqual(proxy.streamRequests().slice(before).map((r) => r.status), [401, 200]);
  await client.shutdown();
});

/** An intervention's status, read through the API. */
async function statusOf(interventionId) {
  const { body } = await service.api('GET', '/api/interventions?limit=200', tenant.adminKey);
  return body.interventions.find((i) => i.id === interventionId)?.status;
}

test('reportClick records the response once; dismiss opts the user out of later messages', async () => {
  const { client, errors } = await identified('u-click', { getInAppToken: () => mintToken('u-click') });
  const messages = [];
  client.onMessage((m) => messages.push(m));
  const shown = await approve('u-click', 'Try the report builder');
  await until(() => messages.length === 1, { what: 'the message' });

  assert.equal(await client.reportClick(shown), true);
  assert.equal(await client.reportClick(shown), false, 'a second click is not a second response');
  await assert.rejects(client.reportClick('6f1c2e9a-9a55-4b8e-9d0e-2f4b8f3c1d11'),
    (err) => err.name === 'CsError' && err.status === 404 && err.code === 'not_found');
  assert.throws(() => client.dismiss(''), TypeError);

  assert.equal(await client.dismiss(shown), true);
  assert.equal(await client.dismiss(shown), false, 'already opted out');
  const refused = await approve('u-click', 'one more?');
  await until(async () => (await statusOf(refused)) === 'failed', { what: 'the next in-app message refused' });
  assert.equal(messages.length, 1);
  assert.deepEqual(errors, []);
  await client.shutdown();
});

test('reportClick without a stream token says what it needs', async () => {
  const { client } = await identified('u-click2');
  await assert.rejects(client.reportClick('x'), /needs init\(\{inAppToken\}\)/);
  await client.shutdown();
});
