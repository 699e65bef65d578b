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
