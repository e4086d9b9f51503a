/**
 * The dashboard's style sheet, inlined in the page's `<style nonce>` (the CSP admits no other).
 * Colours follow the system's light or dark scheme.
 */
export const STYLE = `
:root{--bg:#f5f6f8;--card:#fff;--text:#17202b;--muted:#5d6876;--line:#e2e5ea;--grid:#eef0f3;--accent:#2f6fdf;--bad:#d23f3f;--ok:#1b9a59;--chip:#eef3fd}
@media (prefers-color-scheme:dark){:root{--bg:#0e1217;--card:#161b22;--text:#e5e9ee;--muted:#98a2ae;--line:#29313b;--grid:#1f262f;--accent:#5b8def;--bad:#f06868;--ok:#3fbf7f;--chip:#1b2533}}
*{box-sizing:border-box}
body{margin:0;font:14px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,"DejaVu Sans",sans-serif;background:var(--bg);color:var(--text)}
header{display:flex;align-items:center;gap:12px;padding:10px 24px;background:var(--card);border-bottom:1px solid var(--line);position:sticky;top:0;z-index:2}
header h1{font-size:16px;margin:0;font-weight:650}
header h1 span{font-weight:400;color:var(--muted)}
.spacer{flex:1}
main{max-width:1320px;margin:0 auto;padding:18px 24px 48px}
#dash{display:grid;gap:16px}
[hidden]{display:none!important}
.card{background:var(--card);border:1px solid var(--line);border-radius:10px;padding:14px 18px;min-width:0}
.card>h2{font-size:14px;margin:0 0 10px;font-weight:650;display:flex;align-items:center;gap:10px;flex-wrap:wrap}
.card>h2 .note{font-weight:400;font-size:12px;color:var(--muted)}
.card>h2 .spacer{flex:1}
.row{display:grid;grid-template-columns:repeat(auto-fit,minmax(440px,1fr));gap:16px}
.stats{display:grid;grid-template-columns:repeat(auto-fill,minmax(150px,1fr));gap:10px;margin-bottom:12px}
.stat{border:1px solid var(--line);border-radius:8px;padding:8px 12px}
.stat .label{color:var(--muted);font-size:12px}
.stat .value{font-size:20px;font-weight:650;font-variant-numeric:tabular-nums;white-space:nowrap;overflow:hidden;text-overflow:ellipsis}
.stat .sub{color:var(--muted);font-size:12px}
.stat.bad .value{color:var(--bad)}
table{width:100%;border-collapse:collapse;font-variant-numeric:tabular-nums}
th,td{text-align:left;padding:6px 8px;border-bottom:1px solid var(--line);white-space:nowrap}
th{color:var(--muted);font-weight:500;font-size:12px}
.num{text-align:right}
td.name{max-width:220px;overflow:hidden;text-overflow:ellipsis}
td.bad{color:var(--bad)}
.scroll{overflow-x:auto}
.empty{color:var(--muted);padding:10px 0}
.muted{color:var(--muted)}
.small{font-size:12px}
code,.mono{font-family:ui-monospace,"DejaVu Sans Mono",Menlo,Consolas,monospace;font-size:12.5px}
.alert{border:1px solid var(--bad);color:var(--bad);border-radius:8px;padding:8px 12px;margin:8px 0;background:rgba(210,63,63,.07)}
.notice{border:1px solid var(--ok);border-radius:8px;padding:8px 12px;margin:8px 0;background:rgba(27,154,89,.07)}
.secret{border:1px solid var(--accent);border-radius:8px;padding:10px 12px;margin:8px 0;background:var(--chip)}
.secret code{display:block;margin:6px 0;padding:6px 8px;background:var(--card);border:1px solid var(--line);border-radius:6px;word-break:break-all;user-select:all}
.toolbar{display:flex;flex-wrap:wrap;gap:8px 12px;align-items:end;margin-bottom:12px}
.field{display:grid;gap:2px}
.field label{font-size:12px;color:var(--muted)}
input,select,button{font:inherit;color:inherit}
input,select{background:var(--card);border:1px solid var(--line);border-radius:6px;padding:5px 8px;min-height:32px}
input:focus,select:focus,button:focus-visible{outline:2px solid var(--accent);outline-offset:1px}
button{border:1px solid var(--line);background:var(--card);border-radius:6px;padding:5px 12px;min-height:32px;cursor:pointer}
button:hover{border-color:var(--accent)}
button.primary{background:var(--accent);border-color:var(--accent);color:#fff}
button.danger{color:var(--bad)}
button.danger:hover{border-color:var(--bad)}
button:disabled{opacity:.55;cursor:default}
.seg{display:inline-flex;border:1px solid var(--line);border-radius:6px;overflow:hidden}
.seg button{border:0;border-radius:0;min-height:26px;padding:2px 10px;font-size:12px}
.seg button[aria-pressed=true]{background:var(--chip);color:var(--accent);font-weight:600}
.presets{display:flex;gap:4px}
.presets button{padding:5px 9px}
.pill{font-size:12px;border-radius:999px;padding:3px 10px;border:1px solid var(--line);color:var(--muted);white-space:nowrap}
.pill.ok{color:var(--ok);border-color:var(--ok)}
.pill.bad{color:var(--bad);border-color:var(--bad)}
.signin{max-width:460px;margin:48px auto 0;width:100%}
.signin form{display:grid;gap:8px;margin-top:10px}
.legend{display:flex;flex-wrap:wrap;gap:4px 14px;font-size:12px;margin:6px 0 4px}
.legend span{display:inline-flex;align-items:center;gap:5px}
.chart{display:block;width:100%;overflow:visible}
.chart text{fill:var(--muted);font-size:11px}
.chart .gridline{stroke:var(--grid)}
.chart .baseline{stroke:var(--line)}
.chart .bar:hover{opacity:.8}
.chart .none{font-size:13px}
.minibar .track,.spendbar .track{fill:var(--grid)}
svg .unknown{fill:none;stroke:var(--muted);stroke-dasharray:2 2}
.budget .sub{color:var(--muted);font-size:12px;margin-top:2px;white-space:normal}
.budget td{vertical-align:top}
table.breakdown th{white-space:normal;vertical-align:bottom}
.budget .over{color:var(--bad);font-weight:600}
`
