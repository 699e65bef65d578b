/**
 * The operator as a whole: leader election (when enabled), then the controller. Two
 * replicas are safe: only the Lease holder runs the controller. Tests start it in-process.
 */
import type { KubeConfig } from "@kubernetes/client-node";
import type { BpaConfig } from "./config/config.js";
import { Controller, type ControllerOptions } from "./controller/controller.js";
import { makeClients } from "./runtime/kube.js";
import { LeaderElector } from "./runtime/leader.js";
import type { Logger } from "./runtime/log.js";

export interface OperatorOptions extends ControllerOptions {
  kc: KubeConfig;
  config: BpaConfig;
  log: Logger;
  identity?: string;
  /** Called when leadership is lost (not on a clean stop). main.ts exits so it restarts fresh. */
  onLostLeadership?: (reason: string) => void;
}

export class Operator {
  controller: Controller | undefined;
  readonly elector: LeaderElector | undefined;
  private runPromise: Promise<void> | undefined;
  private stopped = false;

  constructor(private readonly o: OperatorOptions) {
    const le = o.config.leaderElection;
    if (le.enabled) {
      this.elector = new LeaderElector({
        api: makeClients(o.kc).coordination,
        namespace: o.config.namespace,
        name: le.leaseName,
        leaseDurationSeconds: le.leaseDurationSeconds,
        renewDeadlineSeconds: le.renewDeadlineSeconds,
        retryPeriodSeconds: le.retryPeriodSeconds,
        log: o.log,
        ...(o.identity ? { identity: o.identity } : {}),
      });
    }
  }

  isLeader(): boolean {
    return this.elector ? this.elector.isLeader() : !this.stopped;
  }

  /** Starts campaigning (or, without leader election, the controller). Resolves once started. */
  async start(): Promise<void> {
    if (!this.elector) {
      this.controller = this.newController();
      await this.controller.start();
      return;
    }
    this.runPromise = this.elector.run({
      onStartedLeading: async () => {
        if (this.stopped) return;
        this.controller = this.newController();
        await this.controller.start();
      },
      onStoppedLeading: (reason) => {
        const controller = this.controller;
        this.controller = undefined;
        void controller?.stop();
        if (reason !== "stopped") this.o.onLostLeadership?.(reason);
      },
    });
  }

  /** Stops the controller and releases the Lease. */
  async stop(): Promise<void> {
    this.stopped = true;
    const controller = this.controller;
    this.controller = undefined;
    await controller?.stop();
    this.elector?.stop();
    await this.runPromise;
  }

  private newController(): Controller {
    const { kc, config, log, ...options } = this.o;
    return new Controller(makeClients(kc), config, log, options);
  }
}
