/**
 * Minimal, dependency-free SVG charts for the run report: a multi-series line chart and a bar
 * chart. Output is a self-contained <svg> string (no scripts), so a report opens anywhere.
 */

export interface Series {
  readonly name: string;
  readonly points: ReadonlyArray<readonly [number, number]>;
}

const PALETTE = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f"];
const WIDTH = 560;
const HEIGHT = 260;
const MARGIN = { left: 52, right: 120, top: 24, bottom: 36 };

export function escapeXml(text: string): string {
  return text.replace(/[&<>"']/g, (c) => `&#${c.charCodeAt(0)};`);
}

function niceRange(min: number, max: number): [number, number] {
  if (!Number.isFinite(min) || !Number.isFinite(max)) return [0, 1];
  if (min === max) return [min - 1, max + 1];
  const pad = (max - min) * 0.05;
  return [min - pad, max + pad];
}

function ticks(min: number, max: number, count = 5): number[] {
  const step = (max - min) / (count - 1);
  return Array.from({ length: count }, (_, i) => min + i * step);
}

function formatTick(value: number): string {
  const abs = Math.abs(value);
  if (abs !== 0 && (abs < 0.01 || abs >= 10_000)) return value.toExponential(1);
  return Number(value.toFixed(abs < 1 ? 2 : 1)).toString();
}

function frame(
  title: string,
  xLabel: string,
  xRange: [number, number] | undefined,
  yRange: [number, number],
): string[] {
  const plotW = WIDTH - MARGIN.left - MARGIN.right;
  const plotH = HEIGHT - MARGIN.top - MARGIN.bottom;
  const parts = [
    `<text x="${MARGIN.left}" y="16" font-size="13" font-weight="bold">${escapeXml(title)}</text>`,
    `<rect x="${MARGIN.left}" y="${MARGIN.top}" width="${plotW}" height="${plotH}" fill="none" stroke="#999"/>`,
    `<text x="${MARGIN.left + plotW / 2}" y="${HEIGHT - 4}" font-size="11" text-anchor="middle">${escapeXml(xLabel)}</text>`,
  ];
  for (const y of ticks(...yRange)) {
    const py = MARGIN.top + plotH - ((y - yRange[0]) / (yRange[1] - yRange[0])) * plotH;
    parts.push(
      `<line x1="${MARGIN.left}" x2="${MARGIN.left + plotW}" y1="${py.toFixed(1)}" y2="${py.toFixed(1)}" stroke="#eee"/>`,
      `<text x="${MARGIN.left - 4}" y="${(py + 4).toFixed(1)}" font-size="10" text-anchor="end">${formatTick(y)}</text>`,
    );
  }
  for (const x of xRange ? ticks(...xRange) : []) {
    const [x0, x1] = xRange as [number, number];
    const px = MARGIN.left + ((x - x0) / (x1 - x0)) * plotW;
    parts.push(
      `<text x="${px.toFixed(1)}" y="${MARGIN.top + plotH + 14}" font-size="10" text-anchor="middle">${formatTick(x)}</text>`,
    );
  }
  return parts;
}

/** A line chart; series with no points are listed in the legend as "(no data)". */
export function lineChart(title: string, xLabel: string, series: readonly Series[]): string {
  const all = series.flatMap((s) => s.points);
  const xRange = niceRange(Math.min(...all.map((p) => p[0])), Math.max(...all.map((p) => p[0])));
  const yRange = niceRange(Math.min(...all.map((p) => p[1])), Math.max(...all.map((p) => p[1])));
  const plotW = WIDTH - MARGIN.left - MARGIN.right;
  const plotH = HEIGHT - MARGIN.top - MARGIN.bottom;
  const sx = (x: number) => MARGIN.left + ((x - xRange[0]) / (xRange[1] - xRange[0])) * plotW;
  const sy = (y: number) => MARGIN.top + plotH - ((y - yRange[0]) / (yRange[1] - yRange[0])) * plotH;
  const parts = frame(title, xLabel, xRange, yRange);
  series.forEach((s, i) => {
    const color = PALETTE[i % PALETTE.length];
    if (s.points.length > 0) {
      const d = s.points.map((p, j) => `${j === 0 ? "M" : "L"}${sx(p[0]).toFixed(1)},${sy(p[1]).toFixed(1)}`).join("");
      parts.push(`<path d="${d}" fill="none" stroke="${color}" stroke-width="1.6"/>`);
      if (s.points.length === 1) {
        const [x, y] = s.points[0] as readonly [number, number];
        parts.push(`<circle cx="${sx(x).toFixed(1)}" cy="${sy(y).toFixed(1)}" r="3" fill="${color}"/>`);
      }
    }
    const ly = MARGIN.top + 12 + i * 14;
    const label = s.points.length > 0 ? s.name : `${s.name} (no data)`;
    parts.push(
      `<rect x="${WIDTH - MARGIN.right + 8}" y="${ly - 8}" width="10" height="10" fill="${color}"/>`,
      `<text x="${WIDTH - MARGIN.right + 22}" y="${ly + 1}" font-size="11">${escapeXml(label)}</text>`,
    );
  });
  return svg(parts);
}

/** A bar chart of labelled counts (e.g. a staleness histogram). */
export function barChart(title: string, xLabel: string, bars: ReadonlyArray<readonly [string, number]>): string {
  const max = Math.max(1, ...bars.map((b) => b[1]));
  const plotW = WIDTH - MARGIN.left - MARGIN.right;
  const plotH = HEIGHT - MARGIN.top - MARGIN.bottom;
  const parts = frame(title, xLabel, undefined, [0, max]);
  const slot = plotW / Math.max(1, bars.length);
  bars.forEach(([label, value], i) => {
    const h = (value / max) * plotH;
    const x = MARGIN.left + i * slot + slot * 0.15;
    parts.push(
      `<rect x="${x.toFixed(1)}" y="${(MARGIN.top + plotH - h).toFixed(1)}" width="${(slot * 0.7).toFixed(1)}" height="${h.toFixed(1)}" fill="${PALETTE[0]}"/>`,
      `<text x="${(x + slot * 0.35).toFixed(1)}" y="${MARGIN.top + plotH + 14}" font-size="10" text-anchor="middle">${escapeXml(label)}</text>`,
    );
  });
  return svg(parts);
}

function svg(parts: string[]): string {
  return `<svg xmlns="http://www.w3.org/2000/svg" width="${WIDTH}" height="${HEIGHT}" font-family="sans-serif">${parts.join("")}</svg>`;
}
