// node scratchpad/hosttools/mcpclient.mjs <url/mcp> [calls] [concurrency]: CPU per callTool of the SDK client (this process)
import { Client, StreamableHTTPClientTransport } from "@modelcontextprotocol/client"
const [url, n = "4000", conc = "16"] = process.argv.slice(2)
const mode = process.env.MODE ?? "auto"
const client = new Client({ name: "t", version: "1" }, { capabilities: {}, versionNegotiation: { mode } })
await client.connect(new StreamableHTTPClientTransport(new URL(url)))
await client.listTools()
const run = async (calls) => {
  let i = 0
  const worker = async () => { while (i < calls) { i++; await client.callTool({ name: "lookup", arguments: { query: "q" + i } }, { timeout: 30000, signal: new AbortController().signal }) } }
  await Promise.all(Array.from({ length: Number(conc) }, worker))
}
await run(2000)
const t0 = performance.now(); const c0 = process.cpuUsage()
await run(Number(n))
const c = process.cpuUsage(c0)
console.log(`era ${client.getProtocolEra()} ${n} calls @${conc}: wall ${((performance.now() - t0) / Number(n) * 1000).toFixed(0)} µs/call, CPU ${((c.user + c.system) / Number(n)).toFixed(0)} µs/call`)
await client.close()
