import type { Trajectory } from "../../shared/protocol/messages.ts";
import type { ChatMessage } from "../../shared/protocol/openai.ts";
import type { StepRecord, StepTrajectory } from "../../shared/protocol/stepRecord.ts";
import type { TrackerLinks } from "../../shared/tracking/links.ts";
import { scriptJson } from "../report/charts.ts";
import { escapeXml as esc } from "../report/report.ts";
import { type ListPage, type ListQuery, type RunView, SUCCESS_REWARD, type TrajectorySummary } from "./runData.ts";

/** Server-rendered pages of `agentrl view`: plain HTML, one small inline script on the trajectory page. */

const STYLE = `body{font-family:system-ui,sans-serif;margin:0;color:#111}
header{background:#1f2937;color:#fff;padding:8px 16px;display:flex;gap:16px;align-items:baseline}
header a{color:#fff}main{padding:12px 16px}
table{border-collapse:collapse;font-size:13px}td,th{border:1px solid #ddd;padding:3px 6px;text-align:right;white-space:nowrap}
#trajectories{font-size:12px;width:100%}#trajectories td.wrap{white-space:normal;overflow-wrap:anywhere;min-width:8em}
td.yes{color:#15803d;font-weight:bold}td.no{color:#6b7280}
th{background:#f3f4f6}td.l,th.l{text-align:left}.problems{background:#fef3c7;border:1px solid #f59e0b;padding:8px 12px;margin:8px 0}
form{margin:8px 0;display:flex;gap:8px;flex-wrap:wrap;align-items:end}label{font-size:12px;display:flex;flex-direction:column;align-items:flex-start}
.turn{border-left:4px solid #ddd;margin:8px 0;padding:4px 10px}.turn.assistant{border-color:#2563eb}.turn.tool{border-color:#059669}
.turn.user{border-color:#9333ea}.role{font-weight:bold;font-size:12px;text-transform:uppercase;color:#555}
pre{white-space:pre-wrap;margin:4px 0;font-size:13px}.tokens{font-family:ui-monospace,monospace;font-size:13px;line-height:1.9}
.tok{padding:1px 0;border-right:1px solid #fff;white-space:pre}.legend{font-size:12px;color:#444}
.pager a,.pager span{margin-right:8px}.dropped{color:#b91c1c}`;

/** The bar on top of every page, the report included (inline styles: the report brings its own CSS). */
export function navigation(view: RunView): string {
  const link = 'style="color:#fff;margin-right:16px"';
  return `<header id="nav" style="background:#1f2937;color:#fff;padding:8px 16px;font-family:system-ui,sans-serif;display:flex;gap:16px;align-items:baseline"><b>agentrl view</b><span>${esc(view.experimentId)}</span><a ${link} href="/">trajectories</a><a ${link} href="/steps">steps</a><a ${link} href="/report">report</a></header>`;
}

/** The run's report.html with the viewer's navigation on top. */
export function reportPage(view: RunView, html: string): string {
  const body = /<body[^>]*>/i.exec(html);
  if (!body) return `${navigation(view)}${html}`;
  const at = body.index + body[0].length;
  return `${html.slice(0, at)}${navigation(view)}${html.slice(at)}`;
}

function layout(view: RunView, title: string, body: string, script = ""): string {
  const problems =
    view.problems.length > 0
      ? `<div class="problems" id="problems"><b>This run folder is incomplete:</b><ul>${view.problems.map((p) => `<li>${esc(p)}</li>`).join("")}</ul></div>`
      : "";
  return `<!doctype html>
<html><head><meta charset="utf-8"><title>${esc(title)}</title><style>${STYLE}</style></head><body>
${navigation(view)}
<main>${problems}${body}</main>${script}</body></html>`;
}

/** A page that only says what went wrong (404, 400), inside the usual frame. */
export function messagePage(view: RunView, title: string, message: string): string {
  return layout(
    view,
    title,
    `<h1>${esc(title)}</h1><p id="message">${esc(message)}</p><p><a href="/">back to the list</a></p>`,
  );
}

function fixed(x: number | null, digits = 3): string {
  return x === null ? "–" : x.toFixed(digits);
}

function queryString(query: Partial<ListQuery>, change: Partial<ListQuery>): string {
  const merged: Record<string, unknown> = { ...query, ...change };
  const params = new URLSearchParams();
  for (const [k, v] of Object.entries(merged)) if (v !== undefined && v !== "") params.set(k, String(v));
  return `?${params.toString()}`;
}

function select(name: string, label: string, values: readonly (string | number)[], current: unknown): string {
  const options = values
    .map(
      (v) =>
        `<option value="${esc(String(v))}"${String(v) === String(current) ? " selected" : ""}>${esc(String(v))}</option>`,
    )
    .join("");
  return `<label>${label}<select name="${name}"><option value="">any</option>${options}</select></label>`;
}

/** Success is shown apart from status: `completed` with reward 0 ended on its own but failed. */
function successCell(success: boolean): string {
  return success ? '<td class="l yes">yes</td>' : '<td class="l no">no</td>';
}

function trainerCell(s: TrajectorySummary): string {
  if (s.dropped) return `<span class="dropped">step <a href="/steps/${s.step}">${s.step}</a>: ${esc(s.dropped)}</span>`;
  if (s.step !== null) return `<a href="/steps/${s.step}">${s.step}</a>`;
  return "not consumed";
}

const COLUMNS: ReadonlyArray<[ListQuery["sort"] | null, string]> = [
  ["trajectoryId", "trajectory"],
  ["task", "task"],
  ["index", "instance"],
  [null, "group"],
  ["sample", "sample"],
  ["status", "status"],
  ["success", "success"],
  ["reward", "reward"],
  ["normalizedAdvantage", "advantage"],
  ["turns", "turns"],
  ["tokens", "tokens"],
  ["minVersion", "versions"],
  [null, "pools"],
  ["staleness", "staleness"],
  ["step", "trainer step"],
];

const FILTER_KEYS = ["task", "status", "success", "pool", "group", "q", "step", "minReward", "maxReward"] as const;

/** The trajectory list: filter form, sortable headers, one page of rows, pager. */
export function listPage(view: RunView, query: ListQuery, page: ListPage): string {
  const facets = view.facets();
  const filtered = FILTER_KEYS.some((k) => query[k] !== undefined);
  const form = `<form id="filter" method="get" action="/">
${select("task", "task", facets.tasks, query.task)}
${select("status", "status", facets.statuses, query.status)}
${select("success", "success", ["yes", "no"], query.success)}
${select("pool", "pool", facets.pools, query.pool)}
${select("step", "trainer step", ["none", "dropped", ...facets.steps], query.step)}
<label>id contains<input name="q" value="${esc(query.q ?? "")}"></label>
<label>reward ≥<input name="minReward" size="5" value="${query.minReward ?? ""}"></label>
<label>reward ≤<input name="maxReward" size="5" value="${query.maxReward ?? ""}"></label>
${query.group ? `<input type="hidden" name="group" value="${esc(query.group)}">` : ""}
<input type="hidden" name="sort" value="${query.sort}"><input type="hidden" name="dir" value="${query.dir}">
<button type="submit">filter</button> <a href="/">clear</a></form>`;
  const head = COLUMNS.map(([key, label]) => {
    if (!key) return `<th>${label}</th>`;
    const dir = query.sort === key && query.dir === "asc" ? "desc" : "asc";
    const arrow = query.sort === key ? (query.dir === "asc" ? " ▲" : " ▼") : "";
    return `<th><a href="/${queryString(query, { sort: key, dir, page: 1 })}">${label}</a>${arrow}</th>`;
  }).join("");
  const rows = page.rows
    .map(
      (
        s,
      ) => `<tr data-id="${esc(s.trajectoryId)}"><td class="l wrap"><a href="/trajectories/${encodeURIComponent(s.trajectoryId)}">${esc(s.trajectoryId)}</a></td>
<td class="l">${esc(s.task)}</td><td>${s.index}</td><td class="l wrap"><a href="/${queryString({}, { group: s.groupId })}">${esc(s.groupId)}</a></td>
<td>${s.sample}</td><td class="l">${esc(s.status)}</td>${successCell(s.success)}<td>${s.reward.toFixed(3)}</td><td>${fixed(s.normalizedAdvantage)}</td>
<td>${s.turns}</td><td>${s.tokens}</td><td>${s.minVersion < 0 ? "–" : s.minVersion === s.maxVersion ? `v${s.minVersion}` : `v${s.minVersion}–v${s.maxVersion}`}</td>
<td class="l wrap">${esc(s.pools.join(", "))}</td><td>${s.staleness ?? "–"}</td><td class="l wrap">${trainerCell(s)}</td></tr>`,
    )
    .join("");
  const link = (p: number, text: string) => `<a href="/${queryString(query, { page: p })}">${text}</a>`;
  const pager = `<p class="pager">${query.page > 1 ? link(query.page - 1, "← previous") : ""}<span id="page">page ${query.page} of ${page.pages}</span>${query.page < page.pages ? link(query.page + 1, "next →") : ""}</p>`;
  const body = `<h1>Trajectories</h1>${form}
<p id="matching">${page.matching} of ${view.summaries.length} trajectories${filtered ? " match the filter" : ""}</p>
${pager}<table id="trajectories"><thead><tr>${head}</tr></thead><tbody>${rows}</tbody></table>${pager}`;
  return layout(view, `trajectories · ${view.experimentId}`, body);
}

/** Per-token values of a trajectory, null where a measure does not apply (prompt, observation, untrained). */
export interface TokenMeasures {
  readonly advantage: Array<number | null>;
  readonly behaviourLogp: Array<number | null>;
  readonly trainerLogp: Array<number | null>;
  readonly ratio: Array<number | null>;
  readonly clipped: Array<number | null>;
  readonly lossMask: number[];
  readonly version: Array<number | null>;
  readonly pool: Array<string | null>;
}

/** Lines the step record's compact arrays up with the trajectory's tokens. */
export function tokenMeasures(t: Trajectory, entry: StepTrajectory | undefined): TokenMeasures {
  const n = t.tokenIds.length;
  const empty = () => new Array<number | null>(n).fill(null);
  const measures: TokenMeasures = {
    advantage: empty(),
    behaviourLogp: t.lossMask.map((m, i) => (m ? (t.logprobs[i] as number) : null)),
    trainerLogp: empty(),
    ratio: empty(),
    clipped: empty(),
    lossMask: t.lossMask.slice(),
    version: t.policyVersion.map((v) => (v >= 0 ? v : null)),
    pool: t.policyPool.slice(),
  };
  if (!entry) return measures;
  const clipped = new Set(entry.clippedAt);
  let k = 0;
  for (const [start, end] of entry.spans)
    for (let i = start; i < end && i < n; i++, k++) {
      measures.trainerLogp[i] = entry.newLogp[k] as number;
      measures.ratio[i] = entry.ratio[k] as number;
      measures.clipped[i] = clipped.has(i) ? 1 : 0;
      measures.advantage[i] = entry.normalizedAdvantage;
    }
  return measures;
}

const MEASURES: ReadonlyArray<[keyof TokenMeasures, string]> = [
  ["advantage", "advantage (after task normalization)"],
  ["behaviourLogp", "behaviour log-prob"],
  ["trainerLogp", "trainer log-prob"],
  ["ratio", "ratio"],
  ["clipped", "clipped"],
  ["lossMask", "loss mask"],
  ["version", "policy version"],
  ["pool", "pool"],
];

function tokenTitle(m: TokenMeasures, i: number, id: number): string {
  const f = (x: number | null, d = 4) => (x === null ? "–" : String(Number(x.toFixed(d))));
  return [
    `#${i} id ${id}`,
    `advantage ${f(m.advantage[i] ?? null)}`,
    `behaviour logp ${f(m.behaviourLogp[i] ?? null)}`,
    `trainer logp ${f(m.trainerLogp[i] ?? null)}`,
    `ratio ${f(m.ratio[i] ?? null)}`,
    `clipped ${m.clipped[i] === null ? "–" : m.clipped[i] ? "yes" : "no"}`,
    `loss mask ${m.lossMask[i]}`,
    `version ${m.version[i] ?? "–"}`,
    `pool ${m.pool[i] ?? "–"}`,
  ].join(" · ");
}

/** [start, end) runs of generated tokens: one per assistant turn. */
function generatedRuns(lossMask: readonly number[]): Array<[number, number]> {
  const runs: Array<[number, number]> = [];
  lossMask.forEach((m, i) => {
    if (!m) return;
    const last = runs.at(-1);
    if (last && last[1] === i) last[1] = i + 1;
    else runs.push([i, i + 1]);
  });
  return runs;
}

function tokensHtml(view: RunView, t: Trajectory, m: TokenMeasures, [start, end]: [number, number]): string {
  const spans: string[] = [];
  for (let i = start; i < end; i++) {
    const id = t.tokenIds[i] as number;
    const text = view.tokenText(id).replace(/\n/g, "↵\n");
    spans.push(`<span class="tok" data-i="${i}" title="${esc(tokenTitle(m, i, id))}">${esc(text)}</span>`);
  }
  return `<div class="tokens">${spans.join("")}</div>`;
}

function messageHtml(message: ChatMessage): string {
  const parts: string[] = [];
  if (message.content) parts.push(`<pre>${esc(message.content)}</pre>`);
  if (message.role === "assistant")
    for (const call of message.tool_calls ?? [])
      parts.push(`<pre class="call">→ ${esc(call.function.name)}(${esc(call.function.arguments)})</pre>`);
  if (message.role === "tool")
    parts.unshift(`<div class="role">observation${message.name ? ` of ${esc(message.name)}` : ""}</div>`);
  return parts.join("");
}

/** Colours per measure; the browser test checks them against the step record's values. */
const TOKEN_SCRIPT = `
(() => {
  const data = JSON.parse(document.getElementById("token-data").textContent);
  const mix = (a, b, t) => "rgb(" + a.map((x, i) => Math.round(x + (b[i] - x) * t)).join(", ") + ")";
  const WHITE = [255, 255, 255], RED = [220, 38, 38], BLUE = [37, 99, 235], GREEN = [22, 163, 74], PURPLE = [126, 34, 206];
  const clamp = (x) => Math.max(-1, Math.min(1, x));
  const PALETTE = ["#bfdbfe", "#fed7aa", "#bbf7d0", "#fbcfe8", "#ddd6fe", "#fde68a", "#99f6e4", "#e5e7eb"];
  const pools = {};
  const colour = {
    advantage: (v) => (v >= 0 ? mix(WHITE, GREEN, clamp(v / 2)) : mix(WHITE, RED, clamp(-v / 2))),
    behaviourLogp: (v) => mix(WHITE, PURPLE, 1 - Math.exp(v)),
    trainerLogp: (v) => mix(WHITE, PURPLE, 1 - Math.exp(v)),
    ratio: (v) => {
      const t = clamp(Math.log(v) / Math.log(1 + (v >= 1 ? data.clipHigh : data.clipLow)));
      return t >= 0 ? mix(WHITE, RED, t) : mix(WHITE, BLUE, -t);
    },
    clipped: (v) => (v ? "rgb(245, 158, 11)" : "rgb(229, 231, 235)"),
    lossMask: (v) => (v ? "rgb(187, 247, 208)" : "rgb(229, 231, 235)"),
    version: (v) => PALETTE[v % PALETTE.length],
    pool: (v) => PALETTE[(pools[v] ??= Object.keys(pools).length) % PALETTE.length],
  };
  const paint = (measure) => {
    const values = data.measures[measure];
    for (const el of document.querySelectorAll(".tok")) {
      const v = values[Number(el.dataset.i)];
      el.dataset.value = v === null ? "" : String(v);
      el.style.backgroundColor = v === null ? "" : colour[measure](v);
    }
    document.body.dataset.measure = measure;
  };
  const select = document.getElementById("measure");
  select.addEventListener("change", () => paint(select.value));
  paint(select.value);
})();
`;

/** A gateway trajectory's calls (functions/gateway/): one row per chat completion, empty for rollout trajectories. */
export function gatewayCallsHtml(t: Trajectory): string {
  const calls = t.gatewayCalls ?? [];
  if (calls.length === 0) return "";
  const rows = calls
    .map(
      (c, i) =>
        `<tr><td>${i}</td><td class="l">${esc(c.completionId)}</td><td>${c.promptEnd}</td><td>${c.end - c.promptEnd}</td><td class="l">${esc(c.pool)}</td><td>${c.policyVersion < 0 ? "–" : `v${c.policyVersion}`}</td><td class="l">${esc(c.toolCalls.join(", ") || "–")}</td><td class="l">${c.drift ? '<span class="dropped">drift: new segment</span>' : ""}</td></tr>`,
    )
    .join("");
  return `<h2>Gateway calls</h2><p>Recorded by the gateway from the agent's own calls; each call's prompt extends the one before it token for token.</p>
<table id="gateway-calls"><tr><th>#</th><th class="l">completion</th><th>prompt ends at</th><th>generated</th><th class="l">pool</th><th>version</th><th class="l">tool calls</th><th class="l"></th></tr>${rows}</table>`;
}

export function trajectoryPage(view: RunView, t: Trajectory, summary: TrajectorySummary): string {
  const trainer = view.trainerView(t.trajectoryId);
  const record = trainer ? view.steps.get(trainer.step) : undefined;
  const measures = tokenMeasures(t, trainer?.entry);
  const runs = generatedRuns(t.lossMask);
  const assistantCount = t.messages.filter((m) => m.role === "assistant").length;
  const aligned = runs.length === assistantCount;
  let turn = 0;
  const turns = t.messages
    .map((message) => {
      const tokens =
        message.role === "assistant" && aligned ? tokensHtml(view, t, measures, runs[turn++] as [number, number]) : "";
      return `<section class="turn ${message.role}"><div class="role">${message.role}</div>${messageHtml(message)}${tokens}</section>`;
    })
    .join("");
  const unaligned = aligned
    ? ""
    : `<h2>Generated tokens</h2><p>${runs.length} generated runs for ${assistantCount} assistant messages (a truncated episode): shown together.</p>${runs.map((r) => tokensHtml(view, t, measures, r)).join("")}`;
  const group = view
    .groupMembers(t.groupId)
    .map((m) =>
      m.trajectoryId === t.trajectoryId
        ? `<li><b>sample ${m.sample}</b> reward ${m.reward.toFixed(3)} (this one)</li>`
        : `<li><a href="/trajectories/${encodeURIComponent(m.trajectoryId)}">sample ${m.sample}</a> reward ${m.reward.toFixed(3)}, advantage ${fixed(m.normalizedAdvantage)}</li>`,
    )
    .join("");
  const trainerLine = trainer
    ? trainer.dropped
      ? `consumed by <a href="/steps/${trainer.step}">step ${trainer.step}</a> without training: ${esc(trainer.dropped)}`
      : `trained by <a href="/steps/${trainer.step}">step ${trainer.step}</a> (weights v${trainer.trainedVersion}): advantage ${fixed(trainer.entry?.advantage ?? null)} → ${fixed(trainer.entry?.normalizedAdvantage ?? null)} after task normalization, loss share ${fixed(trainer.entry?.policyLoss ?? null, 5)}, ${trainer.entry?.clippedTokens ?? 0} clipped tokens`
    : "not consumed by any recorded trainer step";
  const facts: Array<[string, string]> = [
    ["task", `${t.task} #${t.index}`],
    ["status", t.status],
    ["success", summary.success ? "yes" : `no (success is reward ${SUCCESS_REWARD} on completion)`],
    ["reward", `${t.reward} (environment ${t.envReward})`],
    ["turns", String(t.turns)],
    ["tokens", `${t.tokenIds.length} (${summary.generated} generated)`],
    ["versions", summary.minVersion < 0 ? "–" : `v${summary.minVersion}–v${summary.maxVersion}`],
    ["pools", summary.pools.join(", ") || "–"],
    ["staleness", summary.staleness === null ? "–" : String(summary.staleness)],
  ];
  const options = MEASURES.map(([k, label]) => `<option value="${k}">${label}</option>`).join("");
  const body = `<h1>${esc(t.trajectoryId)}</h1>
<table id="facts">${facts.map(([k, v]) => `<tr><th class="l">${k}</th><td class="l">${esc(v)}</td></tr>`).join("")}</table>
<p id="trainer">${trainerLine}</p>
<h2>Group ${esc(t.groupId)}</h2><ul id="group">${group}</ul>${gatewayCallsHtml(t)}
<p><label>colour tokens by <select id="measure">${options}</select></label>
<span class="legend">hover a token for every value · advantage: red &lt; 0 &lt; green · log-probs: white = probability 1, purple = 0 · ratio: blue &lt; 1 &lt; red, full colour at the clip bound · loss mask: green = trained by the rollout's mask</span></p>
<h2>Turns</h2>${turns}${unaligned}
<script id="token-data" type="application/json">${scriptJson({ measures, clipLow: record?.params.clipLow ?? 0.2, clipHigh: record?.params.clipHigh ?? 0.2 })}</script>`;
  return layout(view, t.trajectoryId, body, `<script>${TOKEN_SCRIPT}</script>`);
}

/** Every recorded step with its losses. */
export function stepsPage(view: RunView): string {
  const rows = [...view.steps.values()]
    .sort((a, b) => a.step - b.step)
    .map(
      (r) =>
        `<tr><td><a href="/steps/${r.step}">${r.step}</a></td><td>v${r.trainedVersion}</td><td>${r.trajectories.length}</td><td>${r.tokens}</td><td>${r.losses.total.toFixed(4)}</td><td>${r.losses.policy.toFixed(4)}</td><td>${r.losses.kl.toFixed(5)}</td><td>${(100 * r.losses.clipFrac).toFixed(1)}</td><td>${r.losses.gradNorm.toFixed(3)}</td></tr>`,
    )
    .join("");
  const body =
    view.steps.size === 0
      ? "<h1>Steps</h1><p>No step records in this run.</p>"
      : `<h1>Steps</h1><table id="steps"><tr><th>step</th><th>weights</th><th>trajectories</th><th>trained tokens</th><th>loss</th><th>policy loss</th><th>kl</th><th>clipped (%)</th><th>grad norm</th></tr>${rows}</table>`;
  return layout(view, `steps · ${view.experimentId}`, body);
}

/** A line linking a step to the tracker runs that hold its metrics (MLflow, W&B), when configured. */
export function trackerRunHtml(links: TrackerLinks, step: number): string {
  const runs = [
    ...(links.mlflow ? [["MLflow", links.mlflow.url, links.mlflow.runId] as const] : []),
    ...(links.wandb ? [["W&amp;B", links.wandb.url, links.wandb.runId] as const] : []),
  ];
  if (runs.length === 0) return "";
  const linked = runs.map(([name, url, id]) => `in ${name}: <a href="${esc(url)}">run ${esc(id)}</a>`);
  return `<p id="tracker-run">step ${step}'s metrics ${linked.join("; ")} (step axis ${step})</p>`;
}

/** One step: its losses and groups (rewards, advantages before and after task normalization, loss shares). */
export function stepPage(view: RunView, record: StepRecord): string {
  const groups = new Map<string, StepTrajectory[]>();
  for (const t of record.trajectories) groups.set(t.groupId, [...(groups.get(t.groupId) ?? []), t]);
  const groupRows = [...groups.entries()]
    .map(([groupId, members]) => {
      const mean = members.reduce((s, m) => s + m.reward, 0) / members.length;
      return members
        .map(
          (m, i) =>
            `<tr${i === 0 ? ' class="group-start"' : ""}>${i === 0 ? `<td class="l" rowspan="${members.length}"><a href="/?group=${encodeURIComponent(groupId)}">${esc(groupId)}</a><br>${esc(m.task)}, mean reward ${mean.toFixed(3)}</td>` : ""}
<td class="l"><a href="/trajectories/${encodeURIComponent(m.trajectoryId)}">${esc(m.trajectoryId)}</a></td><td>${m.reward.toFixed(3)}</td><td>${m.advantage.toFixed(3)}</td><td>${fixed(m.normalizedAdvantage)}</td><td>${m.policyLoss.toFixed(5)}</td><td>${m.newLogp.length}</td><td>${m.clippedTokens}</td><td class="l">${m.dropped ? `<span class="dropped">${esc(m.dropped)}</span>` : ""}</td></tr>`,
        )
        .join("");
    })
    .join("");
  const unloaded =
    record.unloaded.length === 0
      ? ""
      : `<h2>Consumed without loading</h2><ul>${record.unloaded.map((u) => `<li>${esc(u.trajectoryId)}: ${esc(u.dropped)}</li>`).join("")}</ul>`;
  const l = record.losses;
  const body = `<h1>Step ${record.step}</h1>
<p id="losses">weights v${record.trainedVersion} · ${record.tokens} trained tokens · loss ${l.total.toFixed(4)} (policy ${l.policy.toFixed(4)}, kl ${l.kl.toFixed(5)}) · clipped ${(100 * l.clipFrac).toFixed(1)}% · grad norm ${l.gradNorm.toFixed(3)}${l.skipped ? " · <b>optimizer step skipped (non-finite gradient)</b>" : ""} · ${record.params.estimator}, task normalization ${record.params.taskAdvantageNorm ? "on" : "off"}</p>
<table id="groups"><tr><th class="l">group</th><th class="l">trajectory</th><th>reward</th><th>advantage</th><th>after task norm.</th><th>loss share</th><th>trained tokens</th><th>clipped</th><th class="l">dropped</th></tr>${groupRows}</table>${unloaded}
${trackerRunHtml(view.trackerLinks, record.step)}
<p>${view.steps.has(record.step - 1) ? `<a href="/steps/${record.step - 1}">← step ${record.step - 1}</a> ` : ""}${view.steps.has(record.step + 1) ? `<a href="/steps/${record.step + 1}">step ${record.step + 1} →</a>` : ""}</p>`;
  return layout(view, `step ${record.step} · ${view.experimentId}`, body);
}
