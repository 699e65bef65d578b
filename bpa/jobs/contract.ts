/**
 * The contract between the install Job the operator creates and the kubespray runner
 * image (bpa/README.md, "Runner contract"). Both sides use these names.
 */

/** Where the inventory ConfigMap is mounted. */
export const RUNNER_INVENTORY_DIR = "/inventory";
export const RUNNER_INVENTORY_PATH = `${RUNNER_INVENTORY_DIR}/hosts.ini`;
/** group_vars beside hosts.ini, so ansible loads it with the inventory. */
export const RUNNER_GROUP_VARS_PATH = `${RUNNER_INVENTORY_DIR}/group_vars/all/offline.yml`;
/** The registry's site CA (PEM), mounted beside the inventory; the runner puts it on every node. */
export const RUNNER_REGISTRY_CA_PATH = `${RUNNER_INVENTORY_DIR}/registry-ca.crt`;
/** The appliance's kubespray pins, mounted beside the inventory; the runner passes them with -e @. */
export const RUNNER_PINS_PATH = `${RUNNER_INVENTORY_DIR}/kubespray-pins.yml`;
/** Where the SSH private key is mounted (read-only, mode 0400). */
export const RUNNER_SSH_DIR = "/ssh";
export const RUNNER_SSH_KEY_PATH = `${RUNNER_SSH_DIR}/id_ed25519`;

/** Keys of the inventory ConfigMap. */
export const INVENTORY_KEY_HOSTS = "hosts.ini";
export const INVENTORY_KEY_GROUP_VARS = "offline.yml";
export const INVENTORY_KEY_REGISTRY_CA = "registry-ca.crt";
export const INVENTORY_KEY_PINS = "kubespray-pins.yml";

/** Key of the kubeconfig in the `<name>-kubeconfig` Secret the runner writes. */
export const KUBECONFIG_KEY = "kubeconfig";

/** Keys of the SSH key Secret (type kubernetes.io/ssh-auth). */
export const SSH_PRIVATE_KEY = "ssh-privatekey";
export const SSH_PUBLIC_KEY = "ssh-publickey";

/** Environment of the runner container. */
export const RUNNER_ENV = {
  mode: "BPA_MODE", // "install" in the Job, "agent" in the agent pods
  inventory: "BPA_INVENTORY",
  playbook: "BPA_PLAYBOOK",
  operation: "BPA_OPERATION", // install, scale, add-control-plane, remove, upgrade
  limit: "BPA_LIMIT", // comma-separated host names for --limit (the runner refreshes all facts first)
  extraVars: "BPA_EXTRA_VARS", // a JSON object of extra variables (-e name=value)
  sshKey: "BPA_SSH_KEY",
  kubeconfigSecret: "BPA_KUBECONFIG_SECRET",
  kubeconfigKey: "BPA_KUBECONFIG_SECRET_KEY",
  namespace: "BPA_NAMESPACE",
  provisioning: "BPA_PROVISIONING",
  installHash: "BPA_INSTALL_HASH",
  registryCA: "BPA_REGISTRY_CA", // the mounted CA file (RUNNER_REGISTRY_CA_PATH)
  registryCANodePath: "BPA_REGISTRY_CA_NODE_PATH", // where the runner writes it on each node
  pins: "BPA_KUBESPRAY_PINS", // the mounted kubespray pins (RUNNER_PINS_PATH)
  ansibleStrategy: "BPA_ANSIBLE_STRATEGY", // mitogen_linear (the runner's default), mitogen_free, linear, free
  addonsPlan: "BPA_ADDONS_PLAN", // the addons Job's plan (RUNNER_ADDONS_PLAN_PATH)
  addonsResults: "BPA_ADDONS_RESULTS", // the ConfigMap the runner writes each addon's result into
  addonsJob: "BPA_ADDONS_JOB", // the addons Job's name, stamped on every result
  kubeconfig: "BPA_KUBECONFIG", // the application cluster's kubeconfig (RUNNER_KUBECONFIG_PATH)
} as const;

/** The addons Job: its plan and the registry's CA (for Helm's chart pulls) mounted here. */
export const RUNNER_ADDONS_DIR = "/addons";
export const ADDONS_KEY_PLAN = "plan.json";
export const ADDONS_KEY_REGISTRY_CA = "registry-ca.crt";
export const RUNNER_ADDONS_PLAN_PATH = `${RUNNER_ADDONS_DIR}/${ADDONS_KEY_PLAN}`;
export const RUNNER_ADDONS_REGISTRY_CA_PATH = `${RUNNER_ADDONS_DIR}/${ADDONS_KEY_REGISTRY_CA}`;
/** The application cluster's kubeconfig (the `<name>-kubeconfig` Secret) in the addons Job. */
export const RUNNER_KUBECONFIG_DIR = "/kubeconfig";
export const RUNNER_KUBECONFIG_PATH = `${RUNNER_KUBECONFIG_DIR}/${KUBECONFIG_KEY}`;

/**
 * What the addons Job does, as plan.json: releases to install or upgrade, then releases to
 * uninstall. Helm installs each chart by its digest (oci://…/chart@digest); version is the tag
 * it was recorded from, for the log.
 */
export interface AddonsJobPlan {
  apply: { name: string; chart: string; version: string; digest: string; namespace: string; values: Record<string, unknown>; hash: string }[];
  remove: { name: string; namespace: string }[];
}

/** One result the runner writes into the results ConfigMap (key: the addon's name; value: this, as JSON). */
export interface AddonResult {
  job: string;
  state: "Installed" | "Uninstalled" | "Failed";
  message?: string;
}
