/**
 * The infra-local-controller chart (images/infra-local-controller-chart): the appliance's
 * components as one Helm chart, seeded into the registry and written beside the images.
 */
export const CONTROLLER_CHART_REPOSITORY = "charts/infra-local-controller";
