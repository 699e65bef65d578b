/**
 * Vitest global setup of the `integration` project: makes sure etcd and
 * kube-apiserver are in the artifact cache (building them from the pinned Go
 * modules on the first run, see docs/artifacts.md), starts ONE API server for all
 * integration tests and hands them its kubeconfig:
 *
 *   import { inject } from "vitest";
 *   const kubeconfigPath = inject("kubeconfigPath");
 *
 * The server is stopped when the run ends, whether tests passed or failed.
 */
import type {} from "vitest";
import type { TestProject } from "vitest/node";
import { startKubeTestServer } from "../helpers/kube-apiserver.js";

declare module "vitest" {
  export interface ProvidedContext {
    kubeconfigPath: string;
  }
}

export default async function setup(project: TestProject): Promise<() => Promise<void>> {
  const server = await startKubeTestServer();
  project.provide("kubeconfigPath", server.kubeconfigPath);
  return async () => {
    await server.stop();
  };
}
