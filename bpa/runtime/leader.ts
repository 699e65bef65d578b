/**
 * Leader election on a coordination.k8s.io/v1 Lease, after client-go's leaderelection:
 * a candidate takes the Lease when it is free or when its holder has not renewed it for
 * leaseDuration as observed on the candidate's own clock (no clock comparison between
 * machines); the leader renews every retryPeriod and steps down when it could not renew
 * within renewDeadline. Updates use the Lease's resourceVersion, so two candidates
 * racing for it cannot both win. On a clean stop the leader releases the Lease so that a
 * successor takes over at once.
 */
import { randomUUID } from "node:crypto";
import type { CoordinationV1Api, V1Lease } from "@kubernetes/client-node";
import { errorMessage, isConflict, isNotFound } from "./kube.js";
import type { Logger } from "./log.js";

export interface LeaderElectionOptions {
  api: CoordinationV1Api;
  namespace: string;
  name: string;
  identity?: string;
  leaseDurationSeconds: number;
  renewDeadlineSeconds: number;
  retryPeriodSeconds: number;
  log: Logger;
  now?: () => number;
}

/** MicroTime as the API server parses it: RFC 3339 with exactly six fractional digits. */
export function microTime(ms: number): string {
  return new Date(ms).toISOString().replace(/\.(\d{3})Z$/, ".$1000Z");
}

interface Observed {
  holder: string;
  renewTime: string;
  resourceVersion: string;
  at: number;
}

export class LeaderElector {
  readonly identity: string;
  private leading = false;
  private stopped = false;
  private observed: Observed | undefined;
  private lastRenew = 0;
  private timer: NodeJS.Timeout | undefined;
  private wake: (() => void) | undefined;
  private readonly now: () => number;

  constructor(private readonly o: LeaderElectionOptions) {
    this.identity = o.identity ?? `${process.env.HOSTNAME ?? "bpa"}_${randomUUID()}`;
    this.now = o.now ?? Date.now;
  }

  isLeader(): boolean {
    return this.leading;
  }

  /**
   * Campaigns until leading, calls onStartedLeading, then renews until stopped or the
   * Lease is lost; calls onStoppedLeading when it stops leading (not if it never led).
   */
  async run(callbacks: { onStartedLeading: () => void | Promise<void>; onStoppedLeading: (reason: string) => void }): Promise<void> {
    const log = this.o.log;
    while (!this.stopped && !this.leading) {
      if (await this.tryAcquireOrRenew()) break;
      await this.sleep(this.jitter(this.o.retryPeriodSeconds * 1000));
    }
    if (this.stopped) return;
    this.leading = true;
    log.info("became leader", { lease: `${this.o.namespace}/${this.o.name}`, identity: this.identity });
    await callbacks.onStartedLeading();
    while (!this.stopped) {
      await this.sleep(this.o.retryPeriodSeconds * 1000);
      if (this.stopped) break;
      if (await this.tryAcquireOrRenew()) continue;
      if (this.now() - this.lastRenew > this.o.renewDeadlineSeconds * 1000 || this.observed?.holder !== this.identity) {
        this.leading = false;
        const reason =
          this.observed?.holder && this.observed.holder !== this.identity
            ? `lease taken by ${this.observed.holder}`
            : `could not renew the lease within ${this.o.renewDeadlineSeconds}s`;
        log.warn("lost leadership", { reason });
        callbacks.onStoppedLeading(reason);
        return;
      }
    }
    if (this.leading) {
      await this.release();
      this.leading = false;
      callbacks.onStoppedLeading("stopped");
    }
  }

  /** Stops campaigning or leading; a leader releases the Lease. */
  stop(): void {
    this.stopped = true;
    if (this.timer) clearTimeout(this.timer);
    this.wake?.();
  }

  private sleep(ms: number): Promise<void> {
    return new Promise((resolve) => {
      this.wake = resolve;
      this.timer = setTimeout(resolve, ms);
    });
  }

  private jitter(ms: number): number {
    return ms * (1 + Math.random() * 0.2);
  }

  private observe(lease: V1Lease): void {
    const holder = lease.spec?.holderIdentity ?? "";
    const renewTime = String(lease.spec?.renewTime ?? "");
    const resourceVersion = lease.metadata?.resourceVersion ?? "";
    if (!this.observed || this.observed.holder !== holder || this.observed.renewTime !== renewTime) {
      this.observed = { holder, renewTime, resourceVersion, at: this.now() };
    } else {
      this.observed.resourceVersion = resourceVersion;
    }
  }

  /** One attempt; true when this candidate holds the Lease afterwards. */
  async tryAcquireOrRenew(): Promise<boolean> {
    const { api, namespace, name, leaseDurationSeconds } = this.o;
    const now = this.now();
    let lease: V1Lease;
    try {
      lease = await api.readNamespacedLease({ name, namespace });
    } catch (error) {
      if (!isNotFound(error)) {
        this.o.log.warn("cannot read the leader lease", { error: errorMessage(error) });
        return false;
      }
      try {
        const created = await api.createNamespacedLease({
          namespace,
          body: {
            metadata: { name, namespace },
            spec: {
              holderIdentity: this.identity,
              leaseDurationSeconds,
              acquireTime: microTime(now) as unknown as Date,
              renewTime: microTime(now) as unknown as Date,
              leaseTransitions: 0,
            },
          },
        });
        this.observe(created);
        this.lastRenew = now;
        return true;
      } catch (createError) {
        if (!isConflict(createError)) this.o.log.warn("cannot create the leader lease", { error: errorMessage(createError) });
        return false;
      }
    }
    this.observe(lease);
    const spec = lease.spec ?? {};
    const holder = spec.holderIdentity ?? "";
    const duration = (spec.leaseDurationSeconds ?? leaseDurationSeconds) * 1000;
    const mine = holder === this.identity;
    if (holder && !mine && this.observed!.at + duration > now) return false; // held and fresh
    const body: V1Lease = {
      ...lease,
      spec: {
        ...spec,
        holderIdentity: this.identity,
        leaseDurationSeconds,
        renewTime: microTime(now) as unknown as Date,
        ...(mine ? {} : { acquireTime: microTime(now) as unknown as Date, leaseTransitions: (spec.leaseTransitions ?? 0) + 1 }),
      },
    };
    try {
      const updated = await api.replaceNamespacedLease({ name, namespace, body });
      this.observe(updated);
      this.lastRenew = now;
      return true;
    } catch (error) {
      if (!isConflict(error)) this.o.log.warn("cannot update the leader lease", { error: errorMessage(error) });
      return false;
    }
  }

  /** Gives the Lease up (holder cleared, 1 s duration), as client-go's ReleaseOnCancel. */
  private async release(): Promise<void> {
    const { api, namespace, name } = this.o;
    try {
      const lease = await api.readNamespacedLease({ name, namespace });
      if (lease.spec?.holderIdentity !== this.identity) return;
      const now = microTime(this.now()) as unknown as Date;
      await api.replaceNamespacedLease({
        name,
        namespace,
        body: { ...lease, spec: { ...lease.spec, holderIdentity: "", leaseDurationSeconds: 1, renewTime: now, acquireTime: now } },
      });
      this.o.log.info("released the leader lease");
    } catch (error) {
      this.o.log.warn("cannot release the leader lease", { error: errorMessage(error) });
    }
  }
}
