/**
 * An informer (client-node's ListWatch: list, then watch, relist on 410 Gone) that
 * restarts itself after errors with a capped exponential backoff (client-node's stops for
 * good on a list error or a broken watch), and can say whether its first list is in.
 */
import { ListWatch, Watch, type KubeConfig, type KubernetesListObject, type KubernetesObject } from "@kubernetes/client-node";
import { errorMessage } from "./kube.js";
import type { Logger } from "./log.js";

export interface ResilientInformerOptions<T extends KubernetesObject> {
  kc: KubeConfig;
  /** Watch path, e.g. /apis/batch/v1/namespaces/ns/jobs or /apis/batch/v1/jobs. */
  path: string;
  /** The list call; it must apply labelSelector itself. */
  list: () => Promise<KubernetesListObject<T>>;
  labelSelector?: string;
  /** e.g. metadata.name=x: with RBAC resourceNames, the only way to list/watch one object. */
  fieldSelector?: string;
  name: string;
  log: Logger;
  minBackoffMs?: number;
  maxBackoffMs?: number;
}

export type Handler<T> = (obj: T) => void;

export class ResilientInformer<T extends KubernetesObject> {
  private readonly informer;
  private stopped = true;
  private failures = 0;
  private restartTimer: NodeJS.Timeout | undefined;
  private syncedResolve!: () => void;
  private synced = false;
  readonly hasSynced: Promise<void>;
  /** Restarts after errors, for tests and metrics. */
  restarts = 0;

  constructor(private readonly options: ResilientInformerOptions<T>) {
    this.hasSynced = new Promise((resolve) => (this.syncedResolve = resolve));
    const list = async () => {
      const result = await options.list();
      if (!this.synced) {
        // The informer adds the listed items right after this promise settles (same
        // turn of the event loop); a macrotask later they are in the cache.
        setTimeout(() => {
          this.synced = true;
          this.syncedResolve();
        }, 0);
      }
      this.failures = 0;
      return result;
    };
    this.informer = new ListWatch<T>(options.path, new Watch(options.kc), list, false, options.labelSelector, options.fieldSelector);
    this.informer.on("error", (err: unknown) => this.onError(err));
  }

  on(verb: "add" | "update" | "delete", handler: Handler<T>): void {
    this.informer.on(verb, handler);
  }

  get(name: string, namespace?: string): T | undefined {
    return this.informer.get(name, namespace);
  }

  list(namespace?: string): readonly T[] {
    return this.informer.list(namespace);
  }

  isSynced(): boolean {
    return this.synced;
  }

  async start(): Promise<void> {
    this.stopped = false;
    await this.informer.start().catch((err: unknown) => this.onError(err));
  }

  async stop(): Promise<void> {
    this.stopped = true;
    if (this.restartTimer) clearTimeout(this.restartTimer);
    this.restartTimer = undefined;
    await this.informer.stop();
  }

  private onError(err: unknown): void {
    if (this.stopped || this.restartTimer) return;
    const min = this.options.minBackoffMs ?? 250;
    const max = this.options.maxBackoffMs ?? 30_000;
    const delay = Math.min(max, min * 2 ** Math.min(this.failures, 20));
    this.failures += 1;
    const message = err instanceof Error ? errorMessage(err) : JSON.stringify(err);
    this.options.log.warn(`informer ${this.options.name}: ${message}; restarting in ${delay} ms`);
    this.restartTimer = setTimeout(() => {
      this.restartTimer = undefined;
      if (this.stopped) return;
      this.restarts += 1;
      void this.informer.start().catch((e: unknown) => this.onError(e));
    }, delay);
  }
}
