/**
 * TypeScript shapes of the objects the operator reads and writes. They mirror the CRDs
 * in manifests/crds/ (provisioning.yaml, baremetalhost.yaml); the API server is the
 * validator of record, and bpa/api/spec.ts validates what the schema leaves open.
 */
import type { V1ObjectMeta } from "@kubernetes/client-node";

// ---------------------------------------------------------------- Provisioning

/** One master entry as users write it (seed 002: cpu, memory), plus an optional MAC pin. */
export interface MasterEntry {
  cpu?: number;
  /** A Kubernetes quantity ("4Gi") or a number of bytes. */
  memory?: string | number;
  /** Pin this role to the host that has a NIC (or boot NIC) with this MAC address. */
  mac?: string;
}

/** One worker entry (seed 002: cpu, memory, sriov, qat), plus an optional MAC pin. */
export interface WorkerEntry extends MasterEntry {
  sriov?: boolean;
  qat?: boolean;
}

export interface ProvisioningSpec {
  /** A list of entries; a single object (the seed's sample) means a list of one. */
  master?: MasterEntry | MasterEntry[];
  worker?: WorkerEntry | WorkerEntry[];
  /** How many provisioning-agent pods to keep running (see bpa/README.md). */
  replicas?: number;
  /** The application cluster's Kubernetes version; default: the newest the appliance serves. */
  kubernetesVersion?: string;
}

export type ConditionStatus = "True" | "False" | "Unknown";

export interface Condition {
  type: string;
  status: ConditionStatus;
  reason: string;
  message: string;
  lastTransitionTime: string;
  observedGeneration?: number;
}

export type Role = "master" | "worker";

export interface AssignedHost {
  /** BareMetalHost name. */
  name: string;
  namespace: string;
  role: Role;
  /** Index of the entry in spec.master[] or spec.worker[]. */
  index: number;
  mac: string;
  ip: string;
  cpu: number;
  ramMebibytes: number;
}

export type Phase = "Pending" | "Invalid" | "Unsatisfiable" | "Installing" | "Ready" | "Failed";

export interface ProvisioningStatus {
  observedGeneration?: number;
  phase?: Phase;
  conditions?: Condition[];
  assignedHosts?: AssignedHost[];
  /** sha256 of the normalised spec the assignment was made for. */
  specHash?: string;
  /** sha256 of (normalised spec, assignment, retry token): one install per value. */
  installHash?: string;
  installJob?: string;
  inventoryConfigMap?: string;
  kubeconfigSecret?: string;
  sshKeySecret?: string;
  /** Names of the provisioning-agent pods (seed 002). */
  podAgents?: string[];
}

export interface Provisioning {
  apiVersion?: string;
  kind?: string;
  metadata: V1ObjectMeta;
  spec?: ProvisioningSpec;
  status?: ProvisioningStatus;
}

// --------------------------------------------------------------- BareMetalHost

export interface BmhNic {
  name?: string;
  mac?: string;
  ip?: string;
  /** PCI vendor and product IDs, e.g. "0x8086 0x1572". */
  model?: string;
  pxe?: boolean;
  speedGbps?: number;
  vlanId?: number;
}

export interface BmhHardware {
  cpu?: { arch?: string; model?: string; clockMegahertz?: number; count?: number; flags?: string[] };
  ramMebibytes?: number;
  nics?: BmhNic[];
  hostname?: string;
  storage?: unknown[];
  systemVendor?: { manufacturer?: string; productName?: string; serialNumber?: string };
  firmware?: unknown;
}

export interface BareMetalHost {
  apiVersion?: string;
  kind?: string;
  metadata: V1ObjectMeta;
  spec?: {
    online?: boolean;
    bootMACAddress?: string;
    externallyProvisioned?: boolean;
    consumerRef?: { apiVersion?: string; kind?: string; name?: string; namespace?: string };
    userData?: { name?: string; namespace?: string };
    [key: string]: unknown;
  };
  status?: {
    operationalStatus?: string;
    errorType?: string;
    errorMessage?: string;
    errorCount?: number;
    poweredOn?: boolean;
    provisioning?: { ID?: string; state?: string; [key: string]: unknown };
    hardware?: BmhHardware;
    [key: string]: unknown;
  };
}
