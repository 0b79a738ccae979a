import { existsSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { Hono } from "hono";
import { z } from "zod";
import { issuesOf } from "../../shared/errors.ts";
import { listen, type RunningServer } from "../../shared/http.ts";
import { createLogger, type Logger } from "../../shared/log.ts";
import { listPage, messagePage, reportPage, stepPage, stepsPage, trajectoryPage } from "./pages.ts";
import { ListQuery, type RunView } from "./runData.ts";

/**
 * The viewer's routes: `/` (list; filter, sort and page in the query string), `/trajectories/:id`,
 * `/steps`, `/steps/:n`, `/report` (the run's report.html) and `/api/trajectories` (the list as
 * JSON). Bad query → 400 naming the field; unknown id or step → 404; never a blank page.
 */
export function viewerApp(view: RunView, log: Logger = createLogger({ role: "view" })): Hono {
  const app = new Hono();
  app.onError((error, c) => {
    log.error({ err: error, path: c.req.path }, "viewer error");
    return c.html(messagePage(view, "Error", `the viewer failed on ${c.req.path}: ${error.message}`), 500);
  });
  app.notFound((c) => c.html(messagePage(view, "Not found", `no page at ${c.req.path}`), 404));

  const parseList = (query: Record<string, string>) => {
    // an emptied form field means "any"
    const present = Object.fromEntries(Object.entries(query).filter(([, v]) => v !== ""));
    return ListQuery.safeParse(present);
  };
  const badQuery = (error: z.ZodError) =>
    `bad query: ${issuesOf(error)
      .map((i) => `${i.path}: ${i.message}`)
      .join("; ")}`;

  // browsers ask for it on every page; an empty answer keeps their consoles free of 404s
  app.get("/favicon.ico", (c) => c.body(null, 204));
  app.get("/", (c) => {
    const query = parseList(c.req.query());
    if (!query.success) return c.html(messagePage(view, "Bad filter", badQuery(query.error)), 400);
    return c.html(listPage(view, query.data, view.list(query.data)));
  });
  app.get("/api/trajectories", (c) => {
    const query = parseList(c.req.query());
    if (!query.success) return c.json({ error: badQuery(query.error), issues: issuesOf(query.error) }, 400);
    const page = view.list(query.data);
    return c.json({ ...page, total: view.summaries.length, page: query.data.page });
  });
  app.get("/trajectories/:id", async (c) => {
    const id = c.req.param("id");
    const summary = view.summary(id);
    const trajectory = summary && (await view.trajectory(id));
    if (!summary || !trajectory)
      return c.html(messagePage(view, "Not found", `no trajectory "${id}" in this run`), 404);
    return c.html(trajectoryPage(view, trajectory, summary));
  });
  app.get("/steps", (c) => c.html(stepsPage(view)));
  app.get("/steps/:n", (c) => {
    const n = z.coerce.number().int().positive().safeParse(c.req.param("n"));
    if (!n.success)
      return c.html(messagePage(view, "Bad step", `"${c.req.param("n")}" is not a step number (1, 2, …)`), 400);
    const record = view.steps.get(n.data);
    if (!record) return c.html(messagePage(view, "Not found", `no record of step ${n.data} in this run`), 404);
    return c.html(stepPage(view, record));
  });
  app.get("/report", (c) => {
    const file = join(view.runDir, "report.html");
    if (!existsSync(file))
      return c.html(
        messagePage(view, "No report", "this run has no report.html yet; `agentrl report <run-dir>` writes it"),
        404,
      );
    return c.html(reportPage(view, readFileSync(file, "utf8")));
  });
  return app;
}

/** Serves the viewer on host:port (127.0.0.1 and a free port by default). */
export function serveViewer(
  view: RunView,
  options: { port?: number; host?: string; log?: Logger } = {},
): Promise<RunningServer> {
  return listen(viewerApp(view, options.log), options.port ?? 0, options.host ?? "127.0.0.1");
}
