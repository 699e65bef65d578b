/**
 * Builders of the objects the operator creates for a Provisioning: pure functions from
 * (Provisioning, configuration, plan) to Kubernetes objects, unit-tested without a cluster.
 */
import type {
  V1ConfigMap,
  V1Deployment,
  V1Job,
  V1Role,
  V1RoleBinding,
  V1Secret,
  V1ServiceAccount,
  V1Volume,
  V1VolumeMount,
  V1EnvVar,
} from "@kubernetes/client-node";
import {
  ANNOTATION_INSTALL_HASH,
  ANNOTATION_OPERATION,
  ANNOTATION_OUTCOME,
  ANNOTATION_RECORD,
  LABEL_INSTALL_HASH,
  LABEL_MANAGED_BY,
  LABEL_OPERATION,
  MANAGED_BY,
} from "../api/constants.js";
import type { OperationRecord, Provisioning } from "../api/types.js";
import type { OperationPlan } from "./operation.js";
import type { BpaConfig } from "../config/config.js";
import {
  INVENTORY_KEY_GROUP_VARS,
  INVENTORY_KEY_HOSTS,
  INVENTORY_KEY_PINS,
  INVENTORY_KEY_REGISTRY_CA,
  KUBECONFIG_KEY,
  RUNNER_ENV,
  RUNNER_INVENTORY_DIR,
  RUNNER_INVENTORY_PATH,
  RUNNER_PINS_PATH,
  RUNNER_REGISTRY_CA_PATH,
  RUNNER_SSH_DIR,
  RUNNER_SSH_KEY_PATH,
  SSH_PRIVATE_KEY,
  SSH_PUBLIC_KEY,
} from "./contract.js";
import { addonsNames } from "./addons-objects.js";
import { childLabels, names, operationJobName, ownerReference } from "./names.js";
import { cloudInitUserData } from "./ssh-key.js";
import { runnerContainerSecurityContext, runnerPodSecurityContext, runnerTmp } from "./pod-security.js";
import type { ApplianceInputs } from "./hash.js";

export const COMPONENT = {
  install: "install",
  inventory: "inventory",
  kubeconfig: "kubeconfig",
  runner: "runner",
  agent: "agent",
} as const;

/** Names of the per-namespace objects that publish the SSH key. */
export function sshObjectNames(config: BpaConfig) {
  return {
    privateKey: config.sshKeySecret,
    publicKey: `${config.sshKeySecret}-public`,
    userData: `${config.sshKeySecret}-user-data`,
  };
}

function meta(p: Provisioning, name: string, component: string, extraLabels: Record<string, string> = {}) {
  return {
    name,
    namespace: p.metadata.namespace!,
    labels: { ...childLabels(p, component), ...extraLabels },
    ownerReferences: [ownerReference(p)],
  };
}

/** What the inventory ConfigMap carries: kubespray's inventory, the registry's site CA for the nodes and the appliance's kubespray pins. */
export interface InventoryFiles extends ApplianceInputs {
  hostsIni: string;
  groupVarsYaml: string;
}

export function inventoryConfigMap(p: Provisioning, hash: string, files: InventoryFiles): V1ConfigMap {
  const n = names(p, hash);
  return {
    apiVersion: "v1",
    kind: "ConfigMap",
    metadata: {
      ...meta(p, n.inventory!, COMPONENT.inventory, { [LABEL_INSTALL_HASH]: hash.slice(0, 16) }),
      annotations: { [ANNOTATION_INSTALL_HASH]: hash },
    },
    immutable: true,
    data: {
      [INVENTORY_KEY_HOSTS]: files.hostsIni,
      [INVENTORY_KEY_GROUP_VARS]: files.groupVarsYaml,
      [INVENTORY_KEY_REGISTRY_CA]: files.registryCaPem,
      [INVENTORY_KEY_PINS]: files.pins,
    },
  };
}

/** The Secret the runner fills with the application cluster's kubeconfig (empty until then). */
export function kubeconfigSecret(p: Provisioning): V1Secret {
  return {
    apiVersion: "v1",
    kind: "Secret",
    metadata: meta(p, names(p).kubeconfig, COMPONENT.kubeconfig),
    type: "Opaque",
  };
}

/** The runner's identity: allowed to read and write its one kubeconfig Secret and its one addons results ConfigMap, nothing else. */
export function runnerServiceAccount(p: Provisioning): V1ServiceAccount {
  return { apiVersion: "v1", kind: "ServiceAccount", metadata: meta(p, names(p).runner, COMPONENT.runner) };
}

export function runnerRole(p: Provisioning): V1Role {
  return {
    apiVersion: "rbac.authorization.k8s.io/v1",
    kind: "Role",
    metadata: meta(p, names(p).runner, COMPONENT.runner),
    rules: [
      { apiGroups: [""], resources: ["secrets"], resourceNames: [names(p).kubeconfig], verbs: ["get", "update", "patch"] },
      // The addons Job writes each addon's result there (bpa/jobs/addons-objects.ts).
      { apiGroups: [""], resources: ["configmaps"], resourceNames: [addonsNames(p).results], verbs: ["get", "update", "patch"] },
    ],
  };
}

export function runnerRoleBinding(p: Provisioning): V1RoleBinding {
  const n = names(p);
  return {
    apiVersion: "rbac.authorization.k8s.io/v1",
    kind: "RoleBinding",
    metadata: meta(p, n.runner, COMPONENT.runner),
    roleRef: { apiGroup: "rbac.authorization.k8s.io", kind: "Role", name: n.runner },
    subjects: [{ kind: "ServiceAccount", name: n.runner, namespace: p.metadata.namespace! }],
  };
}

function runnerEnv(p: Provisioning, config: BpaConfig, mode: "install" | "agent", hash?: string): V1EnvVar[] {
  const env: V1EnvVar[] = [
    { name: RUNNER_ENV.mode, value: mode },
    { name: RUNNER_ENV.provisioning, value: p.metadata.name! },
    { name: RUNNER_ENV.namespace, valueFrom: { fieldRef: { fieldPath: "metadata.namespace" } } },
    { name: RUNNER_ENV.inventory, value: RUNNER_INVENTORY_PATH },
    { name: RUNNER_ENV.sshKey, value: RUNNER_SSH_KEY_PATH },
    { name: RUNNER_ENV.playbook, value: config.playbook },
    { name: RUNNER_ENV.kubeconfigSecret, value: names(p).kubeconfig },
    { name: RUNNER_ENV.kubeconfigKey, value: KUBECONFIG_KEY },
    { name: RUNNER_ENV.registryCA, value: RUNNER_REGISTRY_CA_PATH },
    { name: RUNNER_ENV.registryCANodePath, value: config.registryCA.nodePath },
    { name: RUNNER_ENV.pins, value: RUNNER_PINS_PATH },
    { name: RUNNER_ENV.ansibleStrategy, value: config.job.ansibleStrategy },
    { name: "ANSIBLE_HOST_KEY_CHECKING", value: "False" },
    runnerTmp().home,
  ];
  if (hash) env.push({ name: RUNNER_ENV.installHash, value: hash });
  return env;
}

function runnerVolumes(config: BpaConfig, inventoryName: string | undefined): { volumes: V1Volume[]; mounts: V1VolumeMount[] } {
  const volumes: V1Volume[] = [
    {
      name: "ssh",
      secret: { secretName: config.sshKeySecret, defaultMode: 0o400, items: [{ key: SSH_PRIVATE_KEY, path: "id_ed25519" }] },
    },
  ];
  const mounts: V1VolumeMount[] = [{ name: "ssh", mountPath: RUNNER_SSH_DIR, readOnly: true }];
  if (inventoryName) {
    volumes.push({
      name: "inventory",
      configMap: {
        name: inventoryName,
        items: [
          { key: INVENTORY_KEY_HOSTS, path: "hosts.ini" },
          { key: INVENTORY_KEY_GROUP_VARS, path: "group_vars/all/offline.yml" },
          { key: INVENTORY_KEY_REGISTRY_CA, path: INVENTORY_KEY_REGISTRY_CA },
          { key: INVENTORY_KEY_PINS, path: INVENTORY_KEY_PINS },
        ],
      },
    });
    mounts.push({ name: "inventory", mountPath: RUNNER_INVENTORY_DIR, readOnly: true });
  }
  const tmp = runnerTmp();
  volumes.push(tmp.volume);
  mounts.push(tmp.mount);
  return { volumes, mounts };
}

export function installJob(
  p: Provisioning,
  config: BpaConfig,
  hash: string,
  record?: Pick<OperationRecord, "hosts" | "description" | "kubernetesVersion">,
): V1Job {
  const job = runnerJob(p, config, hash, names(p, hash).installJob!, { playbook: config.playbook, kind: "install" });
  if (record) job.metadata!.annotations![ANNOTATION_RECORD] = JSON.stringify(record);
  return job;
}

/**
 * A day-2 operation's Job: the runner with the operation's playbook, --limit and extra
 * variables; the cluster it leads to is in an annotation, so that its outcome can be
 * applied from the Job alone (after an operator restart, before status was written).
 */
export function operationJob(p: Provisioning, config: BpaConfig, hash: string, op: OperationPlan): V1Job {
  const job = runnerJob(p, config, hash, operationJobName(p, op.kind, hash), op);
  job.metadata!.annotations![ANNOTATION_OUTCOME] = JSON.stringify(op.outcome);
  job.metadata!.annotations![ANNOTATION_RECORD] = JSON.stringify(operationRecordFields(op));
  return job;
}

/** The fields of an operation's status record that are known when it starts. */
export function operationRecordFields(op: OperationPlan): Pick<OperationRecord, "hosts" | "description" | "kubernetesVersion" | "fromVersion"> {
  return {
    hosts: op.hosts,
    description: op.summary,
    ...(op.kubernetesVersion ? { kubernetesVersion: op.kubernetesVersion } : {}),
    ...(op.fromVersion ? { fromVersion: op.fromVersion } : {}),
  };
}

function runnerJob(
  p: Provisioning,
  config: BpaConfig,
  hash: string,
  name: string,
  op: Pick<OperationPlan, "kind" | "playbook" | "limit" | "extraVars">,
): V1Job {
  const n = names(p, hash);
  const hashLabel = { [LABEL_INSTALL_HASH]: hash.slice(0, 16), [LABEL_OPERATION]: op.kind };
  const { volumes, mounts } = runnerVolumes(config, n.inventory);
  const env = runnerEnv(p, config, "install", hash).map((e) => (e.name === RUNNER_ENV.playbook ? { ...e, value: op.playbook } : e));
  env.push({ name: RUNNER_ENV.operation, value: op.kind });
  if (op.limit?.length) env.push({ name: RUNNER_ENV.limit, value: op.limit.join(",") });
  if (op.extraVars && Object.keys(op.extraVars).length) env.push({ name: RUNNER_ENV.extraVars, value: JSON.stringify(op.extraVars) });
  return {
    apiVersion: "batch/v1",
    kind: "Job",
    metadata: { ...meta(p, name, COMPONENT.install, hashLabel), annotations: { [ANNOTATION_INSTALL_HASH]: hash, [ANNOTATION_OPERATION]: op.kind } },
    spec: {
      backoffLimit: config.job.backoffLimit,
      activeDeadlineSeconds: config.job.activeDeadlineSeconds,
      template: {
        metadata: { labels: { ...childLabels(p, COMPONENT.install), ...hashLabel } },
        spec: {
          restartPolicy: "Never",
          serviceAccountName: n.runner,
          securityContext: runnerPodSecurityContext(),
          containers: [
            {
              name: "kubespray",
              image: config.runnerImage,
              imagePullPolicy: "IfNotPresent",
              args: ["install"],
              env,
              volumeMounts: mounts,
              securityContext: runnerContainerSecurityContext(),
              resources: config.job.resources,
              // The runner writes the failed task there; without it, the log's tail.
              terminationMessagePolicy: "FallbackToLogsOnError",
            },
          ],
          volumes,
        },
      },
    },
  };
}

/**
 * The provisioning agents of seed 002: `spec.replicas` pods running the runner image in
 * agent mode, kept running by a Deployment (a dead pod is replaced by the Deployment
 * controller). They carry the SSH key and the current inventory.
 */
export function agentsDeployment(p: Provisioning, config: BpaConfig, replicas: number, inventoryName: string | undefined): V1Deployment {
  const n = names(p);
  const selector = childLabels(p, COMPONENT.agent);
  delete selector[LABEL_MANAGED_BY];
  const { volumes, mounts } = runnerVolumes(config, inventoryName);
  return {
    apiVersion: "apps/v1",
    kind: "Deployment",
    metadata: meta(p, n.agents, COMPONENT.agent),
    spec: {
      replicas,
      selector: { matchLabels: selector },
      template: {
        metadata: { labels: { ...selector, [LABEL_MANAGED_BY]: MANAGED_BY } },
        spec: {
          serviceAccountName: n.runner,
          securityContext: runnerPodSecurityContext(),
          containers: [
            {
              name: "agent",
              image: config.agentImage,
              imagePullPolicy: "IfNotPresent",
              args: ["agent"],
              env: runnerEnv(p, config, "agent"),
              volumeMounts: mounts,
              securityContext: runnerContainerSecurityContext(),
            },
          ],
          volumes,
        },
      },
    },
  };
}

/** The per-namespace SSH key (not owned by any Provisioning: the hosts keep trusting it). */
export function sshKeySecret(namespace: string, config: BpaConfig, privateKey: string, publicKey: string): V1Secret {
  return {
    apiVersion: "v1",
    kind: "Secret",
    metadata: { name: sshObjectNames(config).privateKey, namespace, labels: { [LABEL_MANAGED_BY]: MANAGED_BY } },
    type: "kubernetes.io/ssh-auth",
    stringData: { [SSH_PRIVATE_KEY]: privateKey, [SSH_PUBLIC_KEY]: publicKey },
  };
}

/** The public half, readable without access to Secrets. */
export function sshPublicKeyConfigMap(namespace: string, config: BpaConfig, publicKey: string): V1ConfigMap {
  return {
    apiVersion: "v1",
    kind: "ConfigMap",
    metadata: { name: sshObjectNames(config).publicKey, namespace, labels: { [LABEL_MANAGED_BY]: MANAGED_BY } },
    data: { authorized_keys: `${publicKey}\n` },
  };
}

/** cloud-init user-data for BareMetalHost spec.userData (Metal3 reads the key "userData"). */
export function userDataSecret(namespace: string, config: BpaConfig, publicKey: string): V1Secret {
  return {
    apiVersion: "v1",
    kind: "Secret",
    metadata: { name: sshObjectNames(config).userData, namespace, labels: { [LABEL_MANAGED_BY]: MANAGED_BY } },
    type: "Opaque",
    stringData: { userData: cloudInitUserData(publicKey, config.sshUser) },
  };
}
