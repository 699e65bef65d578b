/**
 * How the runner's pods run (install and day-2 Jobs, agents, addons Jobs): as Debian's
 * `nobody`, not root. Ansible needs no root on the appliance's side (it becomes root on the
 * nodes over SSH), Helm none at all, and OpenSSH's client needs a user that /etc/passwd
 * knows (the runner image's Debian base has nobody, 65534; the image itself is unchanged).
 * fsGroup makes the mounted SSH key and kubeconfig (0400) readable to that group. The root
 * filesystem is read-only: /tmp, the only place written (the runner's work directory, HOME
 * with Ansible's ~/.ansible, Helm's homes, kubespray's fact cache), is an emptyDir. What
 * the restricted Pod Security level asks, so a namespace may enforce it.
 */
import type { V1EnvVar, V1PodSecurityContext, V1SecurityContext, V1Volume, V1VolumeMount } from "@kubernetes/client-node";

export const RUNNER_UID = 65534;
export const RUNNER_TMP = "/tmp";

export function runnerPodSecurityContext(): V1PodSecurityContext {
  return { runAsNonRoot: true, runAsUser: RUNNER_UID, runAsGroup: RUNNER_UID, fsGroup: RUNNER_UID, seccompProfile: { type: "RuntimeDefault" } };
}

export function runnerContainerSecurityContext(): V1SecurityContext {
  return { allowPrivilegeEscalation: false, readOnlyRootFilesystem: true, capabilities: { drop: ["ALL"] } };
}

/** The writable /tmp of a runner pod (volume and mount) and HOME in it. */
export function runnerTmp(): { volume: V1Volume; mount: V1VolumeMount; home: V1EnvVar } {
  return { volume: { name: "tmp", emptyDir: {} }, mount: { name: "tmp", mountPath: RUNNER_TMP }, home: { name: "HOME", value: RUNNER_TMP } };
}
