import { readFile } from "node:fs/promises";
import { parseCommandArgs } from "../args.js";
import { UserError } from "../errors.js";
import { KINDS, type Kind } from "../../common/uploads.js";
import { upload, UploadFailed } from "../upload-client.js";
import type { Command } from "./command.js";

const MiB = 1024 * 1024;

/** Progress on stderr: one rewritten line on a terminal, a line every 10% otherwise. */
function progressPrinter(name: string): (sent: number, total: number) => void {
  const started = Date.now();
  let lastTenth = -1;
  return (sent, total) => {
    const seconds = (Date.now() - started) / 1000;
    const rate = seconds > 0 ? sent / MiB / seconds : 0;
    const line = `${name}: ${((100 * sent) / Math.max(total, 1)).toFixed(1)}% ${(sent / MiB).toFixed(1)} / ${(total / MiB).toFixed(1)} MiB, ${rate.toFixed(1)} MiB/s`;
    if (process.stderr.isTTY) process.stderr.write(`\r${line}\x1b[K`);
    else if (Math.floor((10 * sent) / Math.max(total, 1)) !== lastTenth) {
      lastTenth = Math.floor((10 * sent) / Math.max(total, 1));
      process.stderr.write(`${line}\n`);
    }
  };
}

export const uploadCommand: Command = {
  name: "upload",
  summary: "upload a file, container image, OS image, Helm chart or appliance image to an appliance's BPA REST API (resumable)",
  usage: `usage: icn-bootstrap upload FILE --kind ${KINDS.join("|")} --name NAME --server URL [options]

Uploads FILE with the tus resumable-upload protocol. When the link or this command is cut,
run the same command again: it continues where the appliance stopped receiving.
The appliance checks the sha256 before publishing anything:
  file             -> http://<appliance>:8080/uploads/NAME (NAME may contain /)
  os-image         -> http://<appliance>:8080/os-images/NAME and NAME.sha256sum (qcow2 or raw)
  container-image  -> pushed to <appliance>:5000/REPOSITORY:TAG (NAME); FILE is an OCI layout
                      tar (skopeo copy IMAGE oci-archive:FILE) or a docker save archive
  chart            -> oci://<appliance>:5000/REPOSITORY, tag VERSION (NAME: REPOSITORY:VERSION,
                      its last segment the chart's name); FILE is what helm package made.
                      A Provisioning's spec.addons names it: {name, chart, version}
  appliance-image  -> kept on the appliance for an upgrade, never served; NAME a relative path
                      ending in .img, .qcow2, .report.json, .cdx.json or .sigstore.json (the
                      build's outputs); only a token bound to bpa-api-appliance-admin may

options:
  --kind KIND       ${KINDS.slice(0, -1).join(", ")} or ${KINDS.at(-1)}
  --name NAME       the name to publish under (container-image: repository[:tag];
                    chart: repository:version, e.g. charts/site-app:0.2.0)
  --server URL      the API, e.g. https://192.168.1.10:30443
  --token TOKEN     a bearer token of the appliance's cluster made for the API's audience
                    (default: $ICN_BPA_TOKEN), e.g.
                    kubectl -n bpa-system create token bpa-api-uploader --audience icn-bpa-api
  --cacert FILE     the appliance's site CA (http://<appliance>:8080/icn-registry-ca.crt;
                    compare its fingerprint with the console's)
  --sha256 HEX      the file's sha256, if known (else computed)`,
  async run(argv) {
    const { values, positionals } = parseCommandArgs(
      "upload",
      argv,
      {
        kind: { type: "string" },
        name: { type: "string" },
        server: { type: "string" },
        token: { type: "string" },
        cacert: { type: "string" },
        sha256: { type: "string" },
      },
      true,
    );
    if (positionals.length !== 1) throw new UserError("upload needs exactly one FILE", "icn-bootstrap upload FILE --kind file --name NAME --server URL");
    const kind = values.kind as Kind | undefined;
    if (!kind || !(KINDS as readonly string[]).includes(kind)) throw new UserError(`--kind ${kind ?? "is missing"}`, `use --kind ${KINDS.join("|")}`);
    if (!values.name) throw new UserError("--name is missing", "the name to publish under, e.g. --name tools/helm-v3.19.0.tar.gz");
    if (!values.server || !/^https?:\/\//.test(values.server))
      throw new UserError(`--server ${values.server ?? "is missing"}`, "the API's URL, e.g. --server https://192.168.1.10:30443");
    const token = values.token ?? process.env.ICN_BPA_TOKEN;
    if (!token)
      throw new UserError(
        "no token",
        "pass --token or set ICN_BPA_TOKEN, e.g. ICN_BPA_TOKEN=$(kubectl -n bpa-system create token bpa-api-uploader --audience icn-bpa-api)",
      );
    const ca = values.cacert ? await readFile(values.cacert, "utf8") : undefined;
    const file = positionals[0]!;
    try {
      const record = await upload({
        file,
        kind,
        name: values.name,
        server: values.server,
        token,
        ...(ca ? { ca } : {}),
        ...(values.sha256 ? { sha256: values.sha256 } : {}),
        progress: progressPrinter(values.name),
        say: (line) => process.stderr.write(`${line}\n`),
      });
      if (process.stderr.isTTY) process.stderr.write("\n");
      console.log(JSON.stringify(record, null, 2));
      return 0;
    } catch (error) {
      if (process.stderr.isTTY) process.stderr.write("\n");
      if (error instanceof UploadFailed) {
        throw new UserError(
          `upload of ${file} as ${kind} "${values.name}" failed: ${error.message}`,
          error.status === undefined
            ? "check --server (https://<appliance>:30443) and the network, then run the same command again: it resumes"
            : error.status < 500
              ? "see the message"
              : "run the same command again: it resumes where the appliance stopped receiving",
        );
      }
      throw error;
    }
  },
};
