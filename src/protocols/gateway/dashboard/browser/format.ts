/** Numbers, money, sizes, durations and days as the dashboard shows them. */
const DAY_MS = 86400000;
const fmtInt = new Intl.NumberFormat("en");
const fmtCompact = new Intl.NumberFormat("en", { notation: "compact", maximumFractionDigits: 1 });
const fmtDay = new Intl.DateTimeFormat("en", { month: "short", day: "numeric", timeZone: "UTC" });
const num = (n: number) => fmtInt.format(n || 0);
const compact = (n: number) => fmtCompact.format(n || 0);
const pct = (rate: number) => (rate * 100).toFixed(rate > 0 && rate < 0.1 ? 1 : 0) + "%";
const rate = (t: Totals) => (t.requests > 0 ? t.errors / t.requests : 0);
const fmtUsd = new Intl.NumberFormat("en", { style: "currency", currency: "USD", minimumFractionDigits: 2, maximumFractionDigits: 2 });
const fmtUsdSmall = new Intl.NumberFormat("en", { style: "currency", currency: "USD", maximumSignificantDigits: 3 });
const fmtWhen = new Intl.DateTimeFormat("en", { month: "short", day: "numeric", year: "numeric", hour: "2-digit", minute: "2-digit", hourCycle: "h23", timeZone: "UTC" });
/** cents when they matter, else three significant digits: one call often costs a fraction of a cent */
const usd = (n: number) => (!n ? fmtUsd.format(0) : n >= 0.1 ? fmtUsd.format(n) : fmtUsdSmall.format(n));
const usdTick = (n: number) => (n >= 1000 ? "$" + compact(n) : usd(n));
/** a cost as far as it is known: calls without a price have an unknown cost, never shown as $0, so a cost with some is a lower bound */
const cost = (t: Totals) => (t.costUsd === null ? "unknown" : t.unpricedCalls > 0 ? (t.costUsd > 0 ? "≥ " + usd(t.costUsd) : "unknown") : usd(t.costUsd));
const share = (f: number) => (f <= 0 ? "0%" : f < 0.001 ? "<0.1%" : (f * 100).toFixed(f < 0.1 ? 1 : 0) + "%");
const bytes = (n: number) => { const u = ["B", "KB", "MB", "GB", "TB"]; let i = 0; while (n >= 1024 && i < u.length - 1) { n /= 1024; i++; } return (i === 0 ? n : n.toFixed(1)) + " " + u[i]; };
const ms = (v: number | null) => (v === null ? "–" : v >= 1000 ? (v / 1000).toFixed(2) + " s" : Math.round(v) + " ms");
const duration = (s: number) => {
  const d = Math.floor(s / 86400), h = Math.floor((s % 86400) / 3600), m = Math.floor((s % 3600) / 60);
  if (d > 0) return d + " d " + h + " h";
  if (h > 0) return h + " h " + m + " min";
  if (m > 0) return m + " min " + (s % 60) + " s";
  return s + " s";
};
const isoDay = (t: number) => new Date(t).toISOString().slice(0, 10);
const dayLabel = (key: string) => fmtDay.format(new Date(key.slice(0, 10) + "T00:00:00Z"));
