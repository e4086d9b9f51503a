/**
 * Usage accounting cost: chat-completions throughput of two gateways that differ only in
 * `usage.enabled`, measured in alternating rounds (so drift hits both alike). Target: recording
 * costs under 5% of throughput.
 */
import { load, median, startGateway } from "./lib.js"

const config = (enabled: boolean) => (dataDir: string) => `
listen: { host: 127.0.0.1, port: 0 }
dataDir: ${JSON.stringify(dataDir)}
accessLog: false
usage: { enabled: ${enabled} }
providers:
  mock: { type: mock }
`

export const usageScenario = async (options: {
  readonly rounds: number
  readonly seconds: number
  readonly note: (scenario: string, measure: string, value: number, unit: string) => void
}) => {
  const on = await startGateway(config(true))
  const off = await startGateway(config(false))
  try {
    const body = { model: "mock/echo", messages: [{ role: "user", content: "usage accounting costs how much?" }] }
    const runs: Record<"on" | "off", Array<number>> = { on: [], off: [] }
    // a warm-up for each, then alternate
    for (const g of [on, off]) await load({ url: `${g.url}/v1/chat/completions`, connections: 32, seconds: 1, body })
    for (let round = 0; round < Math.max(3, options.rounds * 2); round++) {
      const order: ReadonlyArray<"on" | "off"> = round % 2 === 0 ? ["on", "off"] : ["off", "on"]
      for (const name of order) {
        const g = name === "on" ? on : off
        runs[name].push((await load({ url: `${g.url}/v1/chat/completions`, connections: 32, seconds: options.seconds, body })).perSecond)
      }
    }
    const withUsage = median(runs.on)
    const without = median(runs.off)
    options.note("usage accounting", "chat completions/s, usage.enabled: false", without, "req/s")
    options.note("usage accounting", "chat completions/s, usage.enabled: true", withUsage, "req/s")
    options.note("usage accounting", "throughput cost of recording (target < 5%)", (1 - withUsage / without) * 100, "%")
  } finally {
    await on.stop()
    await off.stop()
  }
}
