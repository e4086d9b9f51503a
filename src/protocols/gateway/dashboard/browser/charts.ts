/** Charts in inline SVG: stacked bars over time, their legends, small bars in table cells. */
const RED = "#d23f3f", GREEN = "#1b9a59", BLUE = "#2f6fdf";
const PALETTE = ["#2f6fdf", "#e8590c", "#12a182", "#9c36b5", "#f0a202", "#1098ad", "#d6336c", "#5c7cfa", "#74b816", "#8a94a0"];

interface Bucket { readonly key: string; readonly title: string; readonly label: string | null }
interface Series { readonly name: string; readonly color: string; readonly values: Array<number> }
/**
 * format: values (default a count); empty: the text without values; unknown: per bucket, calls
 * whose cost is unknown (a dashed mark above the bar, since they cannot be a height)
 */
interface ChartOptions {
  readonly label: string; readonly integer?: boolean; readonly format?: (n: number) => string; readonly tick?: (n: number) => string;
  readonly empty?: string; readonly unknown?: ReadonlyArray<number>;
}

const niceStep = (raw: number, integer: boolean | undefined) => {
  if (raw <= 0) return 1;
  const p = Math.pow(10, Math.floor(Math.log10(raw))), f = raw / p;
  const step = (f <= 1 ? 1 : f <= 2 ? 2 : f <= 5 ? 5 : 10) * p;
  return integer ? Math.max(1, Math.ceil(step)) : step;
};
/** series are stacked bottom-up in order */
const barChart = (host: HTMLElement, buckets: ReadonlyArray<Bucket>, series: ReadonlyArray<Series>, options: ChartOptions) => {
  const format = options.format || num, tick = options.tick || compact;
  const width = Math.max(300, Math.floor(host.clientWidth || 600)), height = 210;
  const m = { top: 8, right: 6, bottom: 24, left: options.format ? 62 : 46 };
  const w = width - m.left - m.right, h = height - m.top - m.bottom;
  const totals = buckets.map((_, i) => series.reduce((a, s) => a + (s.values[i] || 0), 0));
  const max = Math.max(0, ...totals);
  const step = niceStep(max / 4, options.integer);
  const top = Math.max(step, Math.ceil(max / step) * step);
  const root = svg("svg", { class: "chart", width, height, viewBox: "0 0 " + width + " " + height, role: "img", "aria-label": options.label });
  for (let v = 0; v <= top + step / 2; v += step) {
    const y = m.top + h - (h * v) / top;
    root.appendChild(svg("line", { class: v === 0 ? "baseline" : "gridline", x1: m.left, x2: width - m.right, y1: y, y2: y }));
    root.appendChild(svg("text", { x: m.left - 6, y: y + 4, "text-anchor": "end" }, tick(v)));
  }
  const slot = w / Math.max(1, buckets.length);
  const bw = Math.max(2, Math.min(40, slot * (slot > 6 ? 0.72 : 0.9)));
  buckets.forEach((b, i) => {
    const x = m.left + slot * i + (slot - bw) / 2;
    let y = m.top + h;
    for (const s of series) {
      const v = s.values[i] || 0;
      if (v <= 0) continue;
      const bh = Math.max(1, (h * v) / top);
      y -= bh;
      root.appendChild(svg("rect", { class: "bar", "data-series": s.name, x: x.toFixed(1), y: y.toFixed(1), width: bw.toFixed(1), height: bh.toFixed(1), fill: s.color }, svg("title", {}, b.title + " · " + s.name + ": " + format(v))));
    }
    const unknown = options.unknown ? options.unknown[i] : 0;
    if (unknown > 0) root.appendChild(svg("rect", { class: "unknown", "data-unpriced": unknown, x: x.toFixed(1), y: (y - 8).toFixed(1), width: bw.toFixed(1), height: 6 }, svg("title", {}, b.title + " · " + num(unknown) + " unpriced " + (unknown === 1 ? "call" : "calls") + ": cost unknown")));
    if (b.label) root.appendChild(svg("text", { x: (m.left + slot * i + slot / 2).toFixed(1), y: height - 6, "text-anchor": "middle" }, b.label));
  });
  if (max === 0) root.appendChild(svg("text", { class: "none", x: m.left + w / 2, y: m.top + h / 2, "text-anchor": "middle" }, options.empty || "No requests in this range"));
  host.replaceChildren(root);
};
const legend = (host: HTMLElement, series: ReadonlyArray<Series>, unknown?: boolean) => host.replaceChildren(...series.map((s) => el("span", {}, [svg("svg", { width: 10, height: 10, "aria-hidden": "true" }, svg("rect", { width: 10, height: 10, rx: 2, fill: s.color })), s.name])),
  ...(unknown ? [el("span", {}, [svg("svg", { width: 10, height: 10, "aria-hidden": "true" }, svg("rect", { class: "unknown", x: 0.5, y: 2.5, width: 9, height: 5 })), "unpriced calls (cost unknown)"])] : []));
const minibar = (fraction: number, color: string) => svg("svg", { class: "minibar", width: 80, height: 8, "aria-hidden": "true" }, [
  svg("rect", { class: "track", x: 0, y: 0, width: 80, height: 8, rx: 3 }),
  svg("rect", { x: 0, y: 0, width: Math.max(fraction > 0 ? 2 : 0, Math.round(80 * Math.min(1, fraction))), height: 8, rx: 3, fill: color })
]);
/** used, then reserved (calls under way), against the limit; past the limit the bar turns red */
const spendbar = (used: number, reserved: number, limit: number) => {
  const W = 150, f = limit > 0 ? used / limit : 1, r = limit > 0 ? reserved / limit : 0;
  const uw = Math.round(W * Math.min(1, f)), rw = Math.round(W * Math.min(1 - Math.min(1, f), r));
  return svg("svg", { class: "spendbar", width: W, height: 10, "aria-hidden": "true" }, [
    svg("rect", { class: "track", x: 0, y: 0, width: W, height: 10, rx: 3 }),
    svg("rect", { class: "used", x: 0, y: 0, width: Math.max(f > 0 ? 2 : 0, uw), height: 10, rx: 3, fill: f >= 1 ? RED : f >= 0.8 ? "#e8590c" : BLUE }),
    rw > 0 ? svg("rect", { class: "reserved", x: uw, y: 0, width: rw, height: 10, fill: BLUE, opacity: 0.35 }) : null
  ]);
};

/** every day of the range, or every hour up to now when the report has hours */
const timeBuckets = (report: UsageReport, hourly: boolean): Array<Bucket> => {
  const from = Date.parse(report.from + "T00:00:00Z"), to = Date.parse(report.to + "T00:00:00Z");
  const keys: Array<string> = [];
  if (!hourly) { for (let t = from; t <= to; t += DAY_MS) keys.push(isoDay(t)); }
  else {
    const now = new Date(); const last = Math.min(to + 23 * 3600000, Date.UTC(now.getUTCFullYear(), now.getUTCMonth(), now.getUTCDate(), now.getUTCHours()));
    for (let t = from; t <= Math.max(last, from); t += 3600000) keys.push(new Date(t).toISOString().slice(0, 13));
  }
  const n = keys.length;
  if (hourly) {
    const every = [1, 2, 3, 6, 12, 24, 48].find((s) => n / s <= 8) || 48;
    return keys.map((k) => {
      const hour = Number(k.slice(11, 13)), dayIndex = Math.round((Date.parse(k.slice(0, 10)) - from) / DAY_MS);
      const labelled = every <= 24 ? hour % every === 0 : hour === 0 && dayIndex % (every / 24) === 0;
      return { key: k, title: dayLabel(k) + " " + k.slice(11, 13) + ":00 UTC", label: labelled ? (hour === 0 ? dayLabel(k) : k.slice(11, 13) + ":00") : null };
    });
  }
  const every = [1, 2, 7, 14, 30, 61].find((s) => n / s <= 8) || 61;
  return keys.map((k, i) => ({ key: k, title: dayLabel(k), label: i % every === 0 ? dayLabel(k) : null }));
};

type Breakdown = "models" | "apps";
type Metric = "requests" | "tokens" | "cost";
const isBreakdown = (v: unknown): v is Breakdown => v === "models" || v === "apps";
const isMetric = (v: unknown): v is Metric => v === "requests" || v === "tokens" || v === "cost";
const metricOf = (metric: Metric) => (t: Totals) => (metric === "tokens" ? (t.inputTokens || 0) + (t.outputTokens || 0) : metric === "cost" ? t.costUsd || 0 : t.requests || 0);
/** a day's entries of a breakdown (days[].models or days[].apps), each with its name */
const entriesOf = (which: Breakdown, d: Day): ReadonlyArray<readonly [string, Totals]> =>
  which === "models" ? d.models.map((e) => [e.model, e] as const) : d.apps.map((e) => [e.app, e] as const);

/** per-day stacked series for a breakdown, biggest first, the rest as "other" */
const breakdown = (report: UsageReport, which: Breakdown, metric: Metric) => {
  const days = timeBuckets(report, false);
  const value = metricOf(metric);
  const totals = new Map<string, Sums>();
  for (const d of report.days) for (const [name, e] of entriesOf(which, d)) totals.set(name, plus(totals.get(name) || zeroTotals(), e));
  const ranked = [...totals].sort((a, b) => value(b[1]) - value(a[1]) || b[1].requests - a[1].requests);
  const named = ranked.slice(0, PALETTE.length - 1).map((r) => r[0]);
  const index = new Map(days.map((d, i) => [d.key, i]));
  const series: Array<Series> = named.map((name, i) => ({ name, color: PALETTE[i], values: days.map(() => 0) }));
  const other: Series = { name: "other", color: PALETTE[PALETTE.length - 1], values: days.map(() => 0) };
  const unknown = days.map(() => 0);
  for (const d of report.days) for (const [name, e] of entriesOf(which, d)) {
    const i = index.get(d.day); if (i === undefined) continue;
    const k = named.indexOf(name);
    (k < 0 ? other : series[k]).values[i] += value(e);
    unknown[i] += e.unpricedCalls || 0;
  }
  if (ranked.length > named.length) series.push(other);
  return { days, series, ranked, unknown };
};
