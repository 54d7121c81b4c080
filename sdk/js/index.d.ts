// Types of the cs JavaScript SDK (hand-written; the code is plain ESM in src/).

/** The clock the client schedules with; tests pass a fake one. Times in milliseconds. */
export interface Clock {
  now(): number;
  setTimeout(callback: () => void, ms: number): unknown;
  clearTimeout(handle: unknown): void;
}

export interface InitOptions {
  /** An API key. In a browser use one with only the `ingest` permission. */
  apiKey: string;
  /** The service address, e.g. "https://cs.example.com"; in a browser defaults to the page's origin. */
  baseUrl?: string;
  /** Events per POST /api/track, 1..100. Default 10. */
  maxBatchSize?: number;
  /** Milliseconds a queued event waits at most before a short batch is sent. Default 1000. */
  flushInterval?: number;
  /** Events kept while the service cannot be reached; past it the oldest are dropped
   * (counted in `stats.dropped`, reported to onError). Default 10000. */
  maxQueueSize?: number;
  /** First retry delay in ms, doubled per failure (with jitter) up to retryMaxDelay. Defaults 1000 and 30000. */
  retryBaseDelay?: number;
  retryMaxDelay?: number;
  /** Milliseconds before a POST that has not answered is abandoned and retried. Default 10000. */
  requestTimeout?: number;
  /** A stream token from POST /api/in-app/tokens, minted by your backend. */
  inAppToken?: string;
  /** Called for a token when the stream opens and when the token is refused (expired). */
  getInAppToken?: () => string | Promise<string>;
  /** Browser only: send the queue with navigator.sendBeacon when the page is hidden. Default true. */
  beacon?: boolean;
  /** A batch refused by the service, events dropped from a full queue, a stream that keeps failing. */
  onError?: (error: CsError) => void;
  clock?: Clock;
  /** Jitter source, [0, 1). Default Math.random. */
  random?: () => number;
  /** Default: the global fetch. */
  fetch?: typeof fetch;
}

export interface Stats {
  /** Events queued or in flight now. */
  queued: number;
  /** Events the service accepted (or already had: see duplicates). */
  sent: number;
  batches: number;
  /** Events of sent batches the service already had (a retried batch). */
  duplicates: number;
  /** Failed sends that were retried. */
  retries: number;
  /** Events dropped because the queue was full. */
  dropped: number;
  /** Events in batches the service refused with a 4xx other than 429. */
  rejected: number;
  /** Events handed to navigator.sendBeacon on page hide. */
  beaconed: number;
}

export interface InterventionMessage {
  event: 'intervention';
  /** The stream's event id (resume point). */
  id: string | null;
  interventionId: string;
  type: 'in_app';
  body: string;
  playbookName: string;
  timestamp: string;
}

export interface WithdrawnMessage {
  event: 'withdrawn';
  id: string | null;
  interventionId: string;
}

export type InAppMessage = InterventionMessage | WithdrawnMessage;

export type Properties = Record<string, unknown>;

export class CsError extends Error {
  kind: 'rejected' | 'overflow' | 'stream';
  /** HTTP status of a refused batch or stream, else null. */
  status: number | null;
  /** The service's error code (e.g. "validation_failed"), when it sent one. */
  code: string | null;
  /** The events dropped or refused. */
  events: Array<{ user_id: string; event: string; properties: Properties; timestamp: string; idempotency_key: string }>;
}

export class Client {
  constructor(options: InitOptions);
  identify(userId: string, traits?: Properties): void;
  setLocale(locale: string): void;
  /** Throws before identify(). */
  track(event: string, properties?: Properties): void;
  /** Resolves when every queued event has been delivered or refused. Throws after shutdown(). */
  flush(): Promise<void>;
  /** Flushes (at most `timeout` ms, default 10000), then stops timers, stream and hooks. */
  shutdown(options?: { timeout?: number }): Promise<void>;
  /** Returns the function that unsubscribes. */
  onMessage(callback: (message: InAppMessage) => void): () => void;
  /** The user clicked the message: their response. Resolves to false when already recorded;
   * rejects with a CsError when the service refuses it. Needs inAppToken or getInAppToken. */
  reportClick(interventionId: string): Promise<boolean>;
  /** The user dismissed the message for good: no more in-app messages for them. Resolves to
   * false when they had already opted out. */
  dismiss(interventionId: string): Promise<boolean>;
  readonly stats: Stats;
}

export function createClient(options: InitOptions): Client;
export function init(options: InitOptions): Client;
export function identify(userId: string, traits?: Properties): void;
export function setLocale(locale: string): void;
export function track(event: string, properties?: Properties): void;
export function flush(): Promise<void>;
export function shutdown(options?: { timeout?: number }): Promise<void>;
export function onMessage(callback: (message: InAppMessage) => void): () => void;
export function reportClick(interventionId: string): Promise<boolean>;
export function dismiss(interventionId: string): Promise<boolean>;
export function stats(): Stats;
