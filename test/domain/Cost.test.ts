import { describe, expect, it } from "vitest"
import { costOf, priceOf } from "../../src/domain/Cost.js"
import type { ProviderTarget } from "../../src/providers/Provider.js"

const usage = { inputTokens: 1_000_000, outputTokens: 200_000, cacheReadTokens: 300_000, cacheWriteTokens: 100_000, reasoningTokens: 50_000 }

describe("costOf", () => {
  it("input at input, cache reads at cacheRead, cache writes at cacheWrite, output (reasoning included) at output", () => {
    // 600k plain input at 1.25, 300k reads at 0.125, 100k writes at 1.5625, 200k output at 10
    expect(costOf({ input: 1.25, output: 10, cacheRead: 0.125, cacheWrite: 1.5625 }, usage)).toBeCloseTo(0.75 + 0.0375 + 0.15625 + 2, 12)
  })
  it("cache reads and writes default to the input price", () => {
    expect(costOf({ input: 2, output: 4 }, usage)).toBeCloseTo(2 + 0.8, 12)
  })
  it("no price: the cost is unknown (null), never 0", () => {
    expect(costOf(undefined, usage)).toBeNull()
    expect(costOf({ input: 0, output: 0 }, usage)).toBe(0)
  })
})

describe("priceOf", () => {
  const target = (provider: string, model: string, price?: { input: number; output: number }): ProviderTarget => ({
    provider,
    providerType: "mock",
    model,
    id: `${provider}/${model}`,
    ...(price !== undefined ? { modelConfig: { price } } : {})
  })
  const providers = { p: { type: "mock" as const, price: { input: 1, output: 2 } }, q: { type: "mock" as const } }
  it("the model's price, else the provider's default, else none", () => {
    expect(priceOf(providers, target("p", "m", { input: 5, output: 6 }))).toEqual({ input: 5, output: 6 })
    expect(priceOf(providers, target("p", "other"))).toEqual({ input: 1, output: 2 })
    expect(priceOf(providers, target("q", "m"))).toBeUndefined()
    expect(priceOf(providers, undefined)).toBeUndefined()
  })
})
