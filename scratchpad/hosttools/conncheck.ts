// node --import tsx scratchpad/hosttools/conncheck.ts <url>: Connection (with its fetch) against an HTTP MCP server: tools, a call, then down reasons
import { Connection } from "../../src/services/tools/Connection.js"
const url = process.argv[2]
const c = new Connection("x", { url, perApp: false, timeoutMs: 5000, readyTimeoutMs: 5000 }, undefined, () => undefined)
c.start()
const tools = await c.ready(5000)
console.log("tools", tools?.map((t) => t.name).join(","))
const r = await c.call(process.argv[3] ?? "echo", JSON.parse(process.argv[4] ?? '{"message":"hi"}'), new AbortController().signal)
console.log("call", JSON.stringify(r).slice(0, 300))
const ac = new AbortController(); setTimeout(() => ac.abort(), Number(process.env.ABORT_MS ?? 5))
console.log("aborted call", JSON.stringify(await c.call(process.argv[3] ?? "echo", JSON.parse(process.argv[4] ?? '{"message":"hi"}'), ac.signal)))
await c.close()
const d = new Connection("down", { url: "http://127.0.0.1:1/mcp", perApp: false, timeoutMs: 5000, readyTimeoutMs: 2000 }, undefined, () => undefined)
d.start(); console.log("down ready", await d.ready(1000), JSON.stringify(d.current())); await d.close()
