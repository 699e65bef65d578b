import * as tar from "tar";

/** Reads one member of a tar archive into memory (members are small text files here). */
export async function readTarMember(archive: string, member: string): Promise<string | undefined> {
  const wanted = new Set([member, `./${member.replace(/^\.\//, "")}`, member.replace(/^\.\//, "")]);
  let content: string | undefined;
  await tar.t({
    file: archive,
    filter: (path) => wanted.has(path),
    onReadEntry: (entry) => {
      const chunks: Buffer[] = [];
      entry.on("data", (chunk: Buffer) => chunks.push(chunk));
      entry.on("end", () => {
        content = Buffer.concat(chunks).toString("utf8");
      });
    },
  });
  return content;
}

/** name -> version of every installed package in a dpkg status file. */
export function parseDpkgStatus(status: string): Record<string, string> {
  const packages: Record<string, string> = {};
  for (const stanza of status.split(/\n\n+/)) {
    const name = /^Package: (.+)$/m.exec(stanza)?.[1];
    const version = /^Version: (.+)$/m.exec(stanza)?.[1];
    const state = /^Status: (.+)$/m.exec(stanza)?.[1];
    if (name && version && state?.endsWith(" installed")) packages[name] = version;
  }
  return Object.fromEntries(Object.entries(packages).sort(([a], [b]) => a.localeCompare(b)));
}
