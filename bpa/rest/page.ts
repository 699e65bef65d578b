/**
 * The status page: Provisionings (phase, Ready, install Job, hosts), BareMetalHosts and
 * uploads. The HTML and script are public and hold no data; the script asks the API
 * with the token the user pastes (kept in the tab's sessionStorage; `#token=...` in the
 * URL also works and is removed from the address bar at once). Data is written with
 * textContent only.
 */

export const PAGE_HTML = `<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<title>ICN bootstrap — status</title>
<meta name="viewport" content="width=device-width, initial-scale=1">
<style>
  body { font: 14px/1.4 system-ui, sans-serif; margin: 0; color: #1d232a; background: #f4f6f8; }
  header { background: #1f3a5f; color: #fff; padding: 12px 20px; display: flex; gap: 16px; align-items: center; }
  header h1 { font-size: 18px; margin: 0; flex: 1; }
  main { padding: 12px 20px; }
  section { background: #fff; border-radius: 6px; margin: 0 0 14px; padding: 10px 14px; box-shadow: 0 1px 2px #0002; }
  h2 { font-size: 15px; margin: 4px 0 8px; }
  table { border-collapse: collapse; width: 100%; }
  th, td { text-align: left; padding: 4px 8px; border-bottom: 1px solid #e3e7eb; vertical-align: top; }
  th { font-weight: 600; color: #4a5561; }
  .state { display: inline-block; padding: 1px 8px; border-radius: 10px; font-weight: 600; }
  .good { background: #1e9e4a; color: #fff; }
  .bad { background: #c62828; color: #fff; }
  .busy { background: #f2a900; color: #222; }
  .idle { background: #d0d7de; color: #222; }
  .note { color: #6a737d; }
  #login input { width: 420px; }
</style>
</head>
<body>
<header><h1>ICN bootstrap appliance</h1><span id="updated" class="note"></span></header>
<main>
  <section id="login" hidden>
    <h2>Token</h2>
    <p class="note">The status needs a token of the bootstrap cluster: <code>kubectl -n bpa-system create token bpa-api-viewer --audience icn-bpa-api</code> (or another ServiceAccount's, with that audience).</p>
    <form id="token-form"><input id="token" type="password" autocomplete="off" placeholder="bearer token"> <button>Show status</button></form>
    <p id="login-error" class="note"></p>
  </section>
  <section><h2>Provisionings</h2><table id="provisionings"><thead><tr><th>namespace/name</th><th>phase</th><th>ready</th><th>install job</th><th>hosts</th></tr></thead><tbody></tbody></table></section>
  <section><h2>Hosts</h2><table id="hosts"><thead><tr><th>namespace/name</th><th>state</th><th>cpu</th><th>RAM MiB</th><th>ip</th><th>consumer</th></tr></thead><tbody></tbody></table></section>
  <section><h2>Uploads</h2><table id="uploads"><thead><tr><th>kind</th><th>name</th><th>state</th><th>size</th><th>digest</th><th>where</th></tr></thead><tbody></tbody></table></section>
</main>
<script src="/page.js"></script>
</body>
</html>
`;

export const PAGE_SCRIPT = String.raw`"use strict";
(function () {
  const GOOD = ["Ready", "published", "succeeded", "provisioned", "externally provisioned", "True"];
  const BAD = ["Failed", "Invalid", "Unsatisfiable", "rejected", "failed", "False", "error"];
  const BUSY = ["Installing", "Pending", "uploading", "verifying", "publishing", "running", "pending", "provisioning", "inspecting"];
  const hash = new URLSearchParams(location.hash.slice(1));
  if (hash.get("token")) {
    sessionStorage.setItem("bpa-token", hash.get("token"));
    history.replaceState(null, "", location.pathname);
  }
  const badge = (text) => {
    const span = document.createElement("span");
    span.className = "state " + (GOOD.includes(text) ? "good" : BAD.includes(text) ? "bad" : BUSY.includes(text) ? "busy" : "idle");
    span.textContent = text;
    return span;
  };
  const size = (n) => (n >= 1 << 30 ? (n / (1 << 30)).toFixed(2) + " GiB" : n >= 1 << 20 ? (n / (1 << 20)).toFixed(1) + " MiB" : n + " B");
  function fill(id, rows, message) {
    const body = document.querySelector("#" + id + " tbody");
    body.replaceChildren();
    if (message || rows.length === 0) {
      const tr = body.insertRow(), td = tr.insertCell();
      td.colSpan = 9; td.className = "note"; td.textContent = message || "none";
      return;
    }
    for (const cells of rows) {
      const tr = body.insertRow();
      for (const cell of cells) {
        const td = tr.insertCell();
        if (cell instanceof Node) td.append(cell); else td.textContent = cell == null ? "" : String(cell);
      }
    }
  }
  async function get(path) {
    const res = await fetch(path, { headers: { authorization: "Bearer " + sessionStorage.getItem("bpa-token") } });
    const body = await res.json().catch(() => ({}));
    if (!res.ok) { const e = new Error(body.error || res.statusText); e.status = res.status; throw e; }
    return body.items;
  }
  async function section(id, path, row) {
    try {
      fill(id, (await get(path)).map(row));
      return true;
    } catch (e) {
      if (e.status === 401) { showLogin(e.message); return false; }
      fill(id, [], (e.status === 403 ? "not allowed: " : "error: ") + e.message);
      return true;
    }
  }
  function showLogin(message) {
    document.getElementById("login").hidden = false;
    document.getElementById("login-error").textContent = message || "";
  }
  async function refresh() {
    if (!sessionStorage.getItem("bpa-token")) return showLogin("");
    document.getElementById("login").hidden = true;
    const results = await Promise.all([
      section("provisionings", "/api/v1/provisionings", (p) => [
        p.namespace + "/" + p.name,
        badge(p.phase),
        p.ready ? badge(p.ready.status) : "",
        p.installJob ? (() => { const s = document.createElement("span"); s.append(p.installJob.name + " ", badge(p.installJob.state)); return s; })() : "",
        p.hosts.map((h) => h.role + ": " + h.name + " (" + h.ip + ")").join(", "),
      ]),
      section("hosts", "/api/v1/hosts", (h) => [h.namespace + "/" + h.name, badge(h.state), h.cpu, h.ramMebibytes, h.ip, h.consumer]),
      section("uploads", "/api/v1/uploads", (u) => [
        u.kind, u.name, badge(u.state),
        u.state === "uploading" ? size(u.offset) + " / " + size(u.size) : size(u.size),
        (u.digest || "sha256:" + u.sha256).slice(0, 19) + "…",
        u.url || u.error || "",
      ]),
    ]);
    if (results.every(Boolean)) document.getElementById("updated").textContent = "updated " + new Date().toLocaleTimeString();
  }
  document.getElementById("token-form").addEventListener("submit", (event) => {
    event.preventDefault();
    sessionStorage.setItem("bpa-token", document.getElementById("token").value.trim());
    refresh();
  });
  refresh();
  setInterval(refresh, 10000);
})();
`;
