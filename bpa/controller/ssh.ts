/** The SSH key of a namespace: created when absent, its public half published for user-data. */
import { SSH_PUBLIC_KEY } from "../jobs/contract.js";
import { sshKeySecret, sshObjectNames, sshPublicKeyConfigMap, userDataSecret } from "../jobs/objects.js";
import { generateSshKeyPair } from "../jobs/ssh-key.js";
import type { BpaConfig } from "../config/config.js";
import { ensureConfigMap, ensureSecret } from "../runtime/ensure.js";
import { isNotFound, type Clients } from "../runtime/kube.js";
import type { Logger } from "../runtime/log.js";

/**
 * The namespace's SSH key Secret, created with a new Ed25519 key pair when absent, and its
 * public half as a ConfigMap (authorized_keys) and a cloud-init user-data Secret. Returns
 * the key Secret's name.
 */
export async function ensureSshKey(c: Clients, config: BpaConfig, log: Logger, namespace: string): Promise<string> {
  const objects = sshObjectNames(config);
  let secret;
  try {
    secret = await c.core.readNamespacedSecret({ namespace, name: objects.privateKey });
  } catch (error) {
    if (!isNotFound(error)) throw error;
    const pair = generateSshKeyPair(`bpa@${namespace}`);
    // Two reconciles in one namespace may race to create it: the loser reads the winner's key.
    const ensured = await ensureSecret(c, sshKeySecret(namespace, config, pair.privateKey, pair.publicKey));
    secret = ensured.object;
    if (!secret.data) secret = await c.core.readNamespacedSecret({ namespace, name: objects.privateKey });
    if (ensured.created) log.info("created the namespace's SSH key", { namespace, secret: objects.privateKey });
  }
  const stored = secret.data?.[SSH_PUBLIC_KEY];
  if (!stored) throw new Error(`Secret ${namespace}/${objects.privateKey} has no "${SSH_PUBLIC_KEY}"; delete it to have a new key made`);
  const publicKey = Buffer.from(stored, "base64").toString().trim();
  const cm = sshPublicKeyConfigMap(namespace, config, publicKey);
  const { object: existingCm, created: cmCreated } = await ensureConfigMap(c, cm);
  if (!cmCreated && existingCm.data?.authorized_keys !== cm.data!.authorized_keys) {
    await c.core.replaceNamespacedConfigMap({ namespace, name: objects.publicKey, body: { ...existingCm, data: cm.data } });
  }
  const ud = userDataSecret(namespace, config, publicKey);
  const { object: existingUd, created: udCreated } = await ensureSecret(c, ud);
  const wanted = Buffer.from(ud.stringData!.userData!).toString("base64");
  if (!udCreated && existingUd.data?.userData !== wanted) {
    await c.core.replaceNamespacedSecret({ namespace, name: objects.userData, body: { ...existingUd, data: { userData: wanted } } });
  }
  return objects.privateKey;
}
