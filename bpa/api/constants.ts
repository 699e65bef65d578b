/** API group, versions and the names this operator stamps on what it creates. */

export const BPA_GROUP = "bpa.akraino.org";
export const BPA_VERSION = "v1alpha1";
export const PROVISIONING_PLURAL = "provisionings";
export const PROVISIONING_KIND = "Provisioning";
export const PROVISIONING_API_VERSION = `${BPA_GROUP}/${BPA_VERSION}`;

export const METAL3_GROUP = "metal3.io";
export const METAL3_VERSION = "v1alpha1";
export const BMH_PLURAL = "baremetalhosts";
export const BMH_KIND = "BareMetalHost";
/** Metal3's HardwareData: a host's inspected hardware, same name and namespace as its BareMetalHost. */
export const HARDWARE_DATA_PLURAL = "hardwaredata";

/** Label on every child object: the name of the Provisioning that owns it. */
export const LABEL_PROVISIONING = `${BPA_GROUP}/provisioning`;
/** Label on every child object: which part of the install it is (install, inventory, agent, ...). */
export const LABEL_COMPONENT = `${BPA_GROUP}/component`;
/** Label on install Jobs and inventory ConfigMaps: the first 16 hex digits of the install hash. */
export const LABEL_INSTALL_HASH = `${BPA_GROUP}/install-hash`;
export const LABEL_MANAGED_BY = "app.kubernetes.io/managed-by";
export const MANAGED_BY = "bpa-operator";

/** Annotation on install Jobs and inventory ConfigMaps: the full install hash. */
export const ANNOTATION_INSTALL_HASH = `${BPA_GROUP}/install-hash`;
/** Annotation and label on operation Jobs: what the Job does (install, scale, add-control-plane, remove, upgrade). */
export const ANNOTATION_OPERATION = `${BPA_GROUP}/operation`;
export const LABEL_OPERATION = `${BPA_GROUP}/operation`;
/** Annotation on day-2 operation Jobs: the cluster (JSON, status.cluster's shape) once the Job succeeded. */
export const ANNOTATION_OUTCOME = `${BPA_GROUP}/outcome`;
/** Annotation on day-2 operation Jobs: its status.operations[] fields known when it starts (JSON: description, hosts, versions). */
export const ANNOTATION_RECORD = `${BPA_GROUP}/record`;
/** Annotation on an addons Job: what it does (JSON AddonsJobRecord, bpa/jobs/addons-objects.ts), so its results can be applied from the Job alone. */
export const ANNOTATION_ADDONS = `${BPA_GROUP}/addons`;
/** Annotation a user sets on a Provisioning (any new value) to re-run a failed install with an unchanged spec. */
export const ANNOTATION_RETRY = `${BPA_GROUP}/retry`;

/** BareMetalHost labels that declare capabilities (they win over what NIC data suggests). */
export const LABEL_SRIOV = `${BPA_GROUP}/sriov`;
export const LABEL_QAT = `${BPA_GROUP}/qat`;

export const FIELD_MANAGER = "bpa-operator";
