import { dirname, resolve } from "node:path";
import { parseCommandArgs } from "../args.js";
import { DEFAULT_DEFINITION, loadDefinition, OUTPUT_FORMATS, type OutputFormat } from "../definition.js";
import { UserError } from "../errors.js";
import { loadLock, lockPathFor } from "../lockfile.js";
import { formatSeconds, log } from "../log.js";
import { build } from "../pipeline.js";
import { summary, writeReport } from "../report.js";
import { assertKeyOutside, loadSigningKey, PASSPHRASE_ENV, REPOSITORY, PASSPHRASE_FILE_ENV, SIGN_KEY_ENV, signOutputs } from "../signing.js";
import type { Command } from "./command.js";

export const buildCommand: Command = {
  name: "build",
  summary: "build the appliance images (USB raw disk and/or qcow2)",
  usage: `usage: icn-bootstrap build [--definition FILE] [--format usb,qcow2] [--out DIR] [--snapshot URL]
                          [--sign-key FILE [--sign-key-passphrase-file FILE]]

Builds the appliance described by an appliance definition. Stages whose inputs did not
change are reused from the cache (~/.cache/icn-bootstrap, or $ICN_BOOTSTRAP_CACHE).

options:
  --definition FILE  appliance definition (default: appliance.yaml in the repository);
                     its lock file is FILE with .lock.yaml (see 'icn-bootstrap lock')
  --format LIST      comma-separated: usb (raw GPT disk, dd to a stick) and/or qcow2
                     (default: the definition's outputs.formats)
  --out DIR          where images and the build report go (default: ./out)
  --snapshot URL     a snapshot archive to fetch pinned .debs from when neither the cache
                     nor the archive's pool has them (default: the lock's debian.snapshot)
  --sign-key FILE    sign the images, the report and the SBOM with this ECDSA P-256 private
                     key (PEM, PKCS#8; default: $${SIGN_KEY_ENV}): each gets a Sigstore
                     bundle beside it, <file>.sigstore.json, that 'icn-bootstrap verify --key'
                     and 'cosign verify-blob --key' check offline. Make a key (keep it outside
                     the repository): openssl genpkey -algorithm EC \
                       -pkeyopt ec_paramgen_curve:P-256 -out sign.key
                     and its public key: openssl pkey -in sign.key -pubout -out sign.pub
  --sign-key-passphrase-file FILE
                     the passphrase of an encrypted key (default: $${PASSPHRASE_FILE_ENV},
                     else the passphrase itself in $${PASSPHRASE_ENV})

Debian packages are fetched as the lock file records them (pool path + sha256): from the
cache, else the archive's pool, else the snapshot archive; the lock is never rewritten.

outputs: DIR/<name>.img, DIR/<name>.qcow2, DIR/<name>.cdx.json (CycloneDX 1.6 SBOM),
DIR/<name>.report.json, DIR/<name>.contents.txt (what 'icn-bootstrap verify' checks),
DIR/<name>.{img,qcow2,report.json,cdx.json}.sigstore.json (with a signing key),
DIR/infra-local-controller-<version>.tgz (the components' Helm chart, docs/developer-path.md)`,
  async run(argv) {
    const { values } = parseCommandArgs("build", argv, {
      definition: { type: "string" },
      format: { type: "string" },
      out: { type: "string" },
      snapshot: { type: "string" },
      "sign-key": { type: "string" },
      "sign-key-passphrase-file": { type: "string" },
    });
    const started = Date.now();
    const definitionPath = resolve(values.definition ?? DEFAULT_DEFINITION);
    const definition = await loadDefinition(definitionPath);
    // Before the build: a wrong key path or passphrase fails now, not after an hour.
    const signingKey = await loadSigningKey({ keyPath: values["sign-key"], passphraseFile: values["sign-key-passphrase-file"] });
    if (signingKey)
      await assertKeyOutside(signingKey, [
        { dir: REPOSITORY, what: "the repository" },
        ...definition.overlays.map((overlay) => ({ dir: resolve(dirname(definitionPath), overlay), what: `the overlay ${overlay}` })),
      ]);
    const lockPath = lockPathFor(definitionPath);
    const lock = await loadLock(lockPath);
    const formats = values.format ? parseFormats(values.format) : definition.outputs.formats;
    const outDir = resolve(values.out ?? "out");
    log("build", `${definition.name}: formats ${formats.join(", ")} -> ${outDir}`);
    const result = await build({ definition, definitionPath, lock, lockPath, formats, outDir, snapshot: values.snapshot });
    const seconds = (Date.now() - started) / 1000;
    const paths = await writeReport(outDir, definition.name, result, seconds);
    console.log(summary(result, paths, seconds));
    const signStarted = Date.now();
    const outputs = [...Object.values(result.images).map((i) => ({ path: i.path, sha256: i.sha256 })), { path: paths.report }, { path: paths.sbom }];
    const bundles = await signOutputs(outputs, signingKey);
    if (signingKey)
      console.log(
        `signed ${bundles.length} files with ${signingKey.source} (key ${signingKey.hint}) in ${formatSeconds(Date.now() - signStarted)}: ${bundles.join(", ")}`,
      );
    else console.log(`unsigned: no --sign-key or $${SIGN_KEY_ENV} was given, so the outputs carry no signature (docs/reproducible-images-sbom-verify.md)`);
  },
};

export function parseFormats(text: string): OutputFormat[] {
  const formats = text
    .split(",")
    .map((f) => f.trim())
    .filter(Boolean);
  const bad = formats.filter((f) => !(OUTPUT_FORMATS as readonly string[]).includes(f));
  if (bad.length > 0 || formats.length === 0) {
    throw new UserError(
      `--format: unknown format ${bad.map((b) => `'${b}'`).join(", ") || "(empty)"}`,
      `use one or more of ${OUTPUT_FORMATS.join(", ")}, comma-separated`,
    );
  }
  return [...new Set(formats)] as OutputFormat[];
}
