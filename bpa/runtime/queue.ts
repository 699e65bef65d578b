/**
 * A rate-limited work queue of keys, after client-go's workqueue: a key is queued at most
 * once, never handed to two workers at the same time (adds while it is processed are
 * replayed when it is done), and failing keys come back after an exponential, per-key
 * backoff that `forget` resets.
 */

export interface QueueOptions {
  /** First retry delay in ms. */
  baseDelayMs?: number;
  /** Longest retry delay in ms. */
  maxDelayMs?: number;
}

export class WorkQueue {
  private readonly queue: string[] = [];
  private readonly queued = new Set<string>();
  private readonly processing = new Set<string>();
  /** Keys added again while being processed. */
  private readonly dirty = new Set<string>();
  private readonly failures = new Map<string, number>();
  private readonly timers = new Map<string, { timer: NodeJS.Timeout; due: number }>();
  private readonly waiters: ((key: string | undefined) => void)[] = [];
  private shuttingDown = false;
  private readonly baseDelayMs: number;
  private readonly maxDelayMs: number;

  constructor(options: QueueOptions = {}) {
    this.baseDelayMs = options.baseDelayMs ?? 200;
    this.maxDelayMs = options.maxDelayMs ?? 5 * 60_000;
  }

  get length(): number {
    return this.queue.length;
  }

  add(key: string): void {
    if (this.shuttingDown) return;
    if (this.processing.has(key)) {
      this.dirty.add(key);
      return;
    }
    if (this.queued.has(key)) return;
    const waiter = this.waiters.shift();
    if (waiter) {
      this.processing.add(key);
      waiter(key);
      return;
    }
    this.queued.add(key);
    this.queue.push(key);
  }

  /** Adds the key after `ms`; an earlier pending delayed add for the key wins. */
  addAfter(key: string, ms: number): void {
    if (this.shuttingDown) return;
    if (ms <= 0) return this.add(key);
    const due = Date.now() + ms;
    const existing = this.timers.get(key);
    if (existing) {
      if (existing.due <= due) return;
      clearTimeout(existing.timer);
    }
    const timer = setTimeout(() => {
      this.timers.delete(key);
      this.add(key);
    }, ms);
    this.timers.set(key, { timer, due });
  }

  /** Adds the key after its backoff: base * 2^failures, capped. Returns the delay. */
  addRateLimited(key: string): number {
    const failures = this.failures.get(key) ?? 0;
    this.failures.set(key, failures + 1);
    const delay = Math.min(this.maxDelayMs, this.baseDelayMs * 2 ** Math.min(failures, 30));
    this.addAfter(key, delay);
    return delay;
  }

  failureCount(key: string): number {
    return this.failures.get(key) ?? 0;
  }

  /** Clears the key's backoff (after a successful reconcile). */
  forget(key: string): void {
    this.failures.delete(key);
  }

  /** The next key to process; undefined once the queue is shut down. Call done(key) after. */
  get(): Promise<string | undefined> {
    const key = this.queue.shift();
    if (key !== undefined) {
      this.queued.delete(key);
      this.processing.add(key);
      return Promise.resolve(key);
    }
    if (this.shuttingDown) return Promise.resolve(undefined);
    return new Promise((resolve) => this.waiters.push(resolve));
  }

  done(key: string): void {
    this.processing.delete(key);
    if (this.dirty.delete(key)) this.add(key);
  }

  shutdown(): void {
    this.shuttingDown = true;
    for (const { timer } of this.timers.values()) clearTimeout(timer);
    this.timers.clear();
    this.queue.length = 0;
    this.queued.clear();
    for (const waiter of this.waiters.splice(0)) waiter(undefined);
  }
}
