/** One SDK client: who the user is, the event queue, the in-app stream, page-hide beacons. */

import { CsError, errorBody } from './errors.js';
import { uuid4 } from './ids.js';
import { resolveOptions } from './options.js';
import { beaconSender, watchPageHide } from './page.js';
import { Sender } from './sender.js';
import { InAppStream } from './stream.js';

const MAX_NAME_CHARS = 255; // the service takes user ids and event names of 1 to 255 characters

export class Client {
  constructor(options) {
    const o = resolveOptions(options);
    this.options = o;
    this.userId = null;
    this.closed = false;
    this.stream = null;
    this.report = (err) => {
      try {
        o.onError(err);
      } catch {
        // a throwing onError must not break sending
      }
    };
    const url = `${o.baseUrl}/api/track`;
    this.sender = new Sender({ ...o, url, report: this.report });
    const beacon = o.beacon ? beaconSender(url, o.apiKey) : null;
    this.stopWatching = beacon ? watchPageHide(() => this.sender.handOff(beacon)) : () => {};
  }

  /** Sets the user of every later event and sends `$identify` with the traits. */
  identify(userId, traits = {}) {
    if (typeof userId !== 'string' || !userId) throw new TypeError('cs: identify(userId) needs a non-empty string');
    checkLength(userId, 'identify(userId): userId');
    this.open('identify');
    const properties = plainObject(traits, 'identify(userId, traits): traits');
    this.userId = userId;
    this.queue('$identify', properties);
  }

  /** Sends `$locale` for the identified user. */
  setLocale(locale) {
    if (typeof locale !== 'string' || !locale) throw new TypeError('cs: setLocale(locale) needs a string such as "fr-FR"');
    this.ready('setLocale');
    this.queue('$locale', { locale });
  }

  track(event, properties = {}) {
    if (typeof event !== 'string' || !event) throw new TypeError('cs: track(event) needs an event name (snake_case)');
    checkLength(event, 'track(event): event');
    this.ready('track');
    this.queue(event, plainObject(properties, `track("${event}", properties): properties`));
  }

  flush() {
    this.open('flush');
    return this.sender.flush();
  }

  /** Flushes (for at most `timeout` ms), then stops the timers, the stream and the
   * page-hide hooks; later calls are refused. */
  async shutdown({ timeout = 10000 } = {}) {
    if (this.closed) return;
    this.closed = true;
    this.stopWatching();
    this.stream?.close();
    await this.sender.shutdown(timeout);
  }

  /** Calls `callback` with each in-app message of the user whose token the client holds:
   * `{event: 'intervention', id, interventionId, type, body, playbookName, timestamp}` or
   * `{event: 'withdrawn', id, interventionId}`. Returns the function that stops it. */
  onMessage(callback) {
    if (typeof callback !== 'function') throw new TypeError('cs: onMessage(callback) needs a function');
    this.open('onMessage');
    const { inAppToken, getInAppToken } = this.options;
    if (inAppToken == null && getInAppToken == null) {
      throw new Error('cs: onMessage() needs init({inAppToken}) or init({getInAppToken}), a token your backend mints with POST /api/in-app/tokens');
    }
    this.stream ??= new InAppStream({
      ...this.options, token: inAppToken ?? null, getToken: getInAppToken, report: this.report,
    });
    return this.stream.subscribe(callback);
  }

  /** Reports that the user clicked in-app message `interventionId` (their response to
   * it). Resolves to true when recorded, false when a click was already recorded. */
  reportClick(interventionId) {
    return this.inAppEvent('reportClick', interventionId, 'clicked');
  }

  /** The user dismissed in-app message `interventionId` for good: they get no more in-app
   * messages. Resolves to true when recorded, false when they had already opted out. */
  dismiss(interventionId) {
    return this.inAppEvent('dismiss', interventionId, 'dismissed');
  }

  /** Checks the arguments at the caller's line, then posts. */
  inAppEvent(method, interventionId, action) {
    if (typeof interventionId !== 'string' || !interventionId) {
      throw new TypeError(`cs: ${method}(interventionId) needs the interventionId of a message`);
    }
    this.open(method);
    return this.postInAppEvent(method, interventionId, action);
  }

  async postInAppEvent(method, interventionId, action) {
    const { baseUrl, fetch, getInAppToken } = this.options;
    const post = async (token) => fetch(`${baseUrl}/api/in-app/events`, {
      method: 'POST',
      headers: { 'Content-Type': 'application/json' },
      body: JSON.stringify({ token, intervention_id: interventionId, action }),
    });
    let response = await post(await this.inAppToken(method));
    if (response.status === 401 && getInAppToken) {   // expired: the stream will want a fresh one too
      const fresh = await getInAppToken();
      if (this.stream) this.stream.token = fresh;
      response = await post(fresh);
    }
    if (!response.ok) {
      const { error, code } = await errorBody(response);
      throw new CsError(`cs: ${method}() refused (${response.status}): ${error || 'no reason given'}`,
        { kind: 'rejected', status: response.status, code });
    }
    return (await response.json()).recorded;
  }

  async inAppToken(method) {
    const { inAppToken, getInAppToken } = this.options;
    const token = this.stream?.token ?? inAppToken ?? (getInAppToken ? await getInAppToken() : null);
    if (token == null) {
      throw new Error(`cs: ${method}() needs init({inAppToken}) or init({getInAppToken}), the stream token of the user`);
    }
    return token;
  }

  get stats() {
    return this.sender.stats();
  }

  queue(event, properties) {
    this.sender.enqueue({
      user_id: this.userId,
      event,
      properties,
      timestamp: new Date(this.options.clock.now()).toISOString(),
      idempotency_key: uuid4(),
    });
  }

  open(method) {
    if (this.closed) throw new Error(`cs: ${method}() after shutdown(); call init() again`);
  }

  ready(method) {
    this.open(method);
    if (this.userId == null) throw new Error(`cs: ${method}() before identify(userId); identify the user first`);
  }
}

/** Refused here rather than by the service, which would drop the whole batch with it. */
function checkLength(value, what) {
  const chars = value.length > MAX_NAME_CHARS ? [...value].length : value.length; // as the service counts
  if (chars > MAX_NAME_CHARS) throw new RangeError(`cs: ${what} must be at most ${MAX_NAME_CHARS} characters, not ${chars}`);
}

/** A copy, so that a later change to the caller's object does not change a queued event,
 * made through JSON so that what cannot be sent fails here, at the caller's line. */
function plainObject(value, what) {
  if (value == null || typeof value !== 'object' || Array.isArray(value)) {
    throw new TypeError(`cs: ${what} must be a plain object`);
  }
  try {
    return JSON.parse(JSON.stringify(value, finiteOnly));
  } catch (err) {
    throw new TypeError(`cs: ${what} cannot be sent as JSON (${err.message})`);
  }
}

/** JSON.stringify would write NaN and Infinity as null without a word. */
function finiteOnly(key, value) {
  if (typeof value === 'number' && !Number.isFinite(value)) throw new TypeError(`${key || 'a value'} is ${value}`);
  return value;
}
