import { describe, expect, it } from "@effect/vitest"
import { Effect, Either } from "effect"
import * as fc from "fast-check"
import type { GatewayError } from "../../../src/domain/Errors.js"
import { Catalog, type ResolveOptions } from "../../../src/services/routing/Catalog.js"
import { configOf } from "../../support/Gateway.js"

/**
 * Resolution rules as the code has them:
 * - an exact alias wins over everything; then glob aliases, longest pattern first (a longer pattern
 *   has more literal text, since a glob holds one `*`); then `<provider>/<model>` of a configured provider;
 * - a glob alias replaces the `*` of each target with what its own `*` matched: `claude-*: anthropic/*`
 *   turns `claude-opus-4` into provider `anthropic`, model `opus-4` (the literal `claude-` is not kept);
 * - the caller's `#variant` applies to every target and must exist on each, or 400 invalid_model_variant;
 * - `reasoningEffort` picks a variant only when the id has none and the model has one of that name
 *   (or, with `nearestAbove`, the nearest one above or the highest).
 */
const document = {
  keys: [{ key: "team-a-key-0001", app: "team-a" }],
  providers: {
    anthropic: {
      type: "mock",
      models: {
        "opus-4": { contextLimit: 200000, variants: { low: { reasoningEffort: "low" }, high: { reasoningEffort: "high", params: { budget: 32000 } } } }
      }
    },
    openai: { type: "mock", models: { "gpt-5": { variants: { high: { reasoningEffort: "high" } } } } },
    local: { type: "mock" }
  },
  aliases: {
    // the less specific glob first, to show the order in the file does not matter
    "claude-*": "anthropic/*",
    "claude-3-*": "local/legacy-*",
    "*-mini": "local/small-*",
    fast: "openai/gpt-5",
    deep: "anthropic/opus-4#high",
    smart: { targets: ["anthropic/opus-4", "openai/gpt-5", "local/llama"] }
  },
  apps: { "team-a": { allowedModels: ["openai/*", "fast", "local/small-*"] } }
}

const catalog = Catalog.make(configOf(document))
const open = catalog.app("default")
const teamA = catalog.app("team-a")

const resolve = (model: string, options?: ResolveOptions, app = open) => catalog.resolve(model, app, options)
const targetsOf = (model: string, options?: ResolveOptions, app = open) =>
  Effect.map(resolve(model, options, app), (r) => r.targets.map((t) => ({ provider: t.provider, model: t.model, id: t.id, variant: t.variant })))
const failureOf = (model: string, options?: ResolveOptions, app = open) => Effect.flip(resolve(model, options, app))

const expectError = (error: GatewayError, status: number, code: string) => expect(error).toMatchObject({ _tag: "GatewayError", status, code, param: "model" })

describe("Catalog.resolve", () => {
  it.effect("serves <provider>/<model> of a configured provider, listed or not, the model keeping its slashes", () =>
    Effect.gen(function* () {
      const listed = yield* resolve("anthropic/opus-4")
      expect(listed.requested).toBe("anthropic/opus-4")
      expect(listed.targets).toEqual([expect.objectContaining({ provider: "anthropic", providerType: "mock", model: "opus-4", id: "anthropic/opus-4" })])
      expect(listed.targets[0].modelConfig?.contextLimit).toBe(200000)
      const unlisted = yield* resolve("local/org/model-x")
      expect(unlisted.targets).toEqual([{ provider: "local", providerType: "mock", model: "org/model-x", id: "local/org/model-x" }])
    })
  )

  it.effect("resolves an exact alias", () =>
    Effect.gen(function* () {
      expect(yield* targetsOf("fast")).toEqual([{ provider: "openai", model: "gpt-5", id: "openai/gpt-5", variant: undefined }])
    })
  )

  it.effect("carries the star of a glob alias into its target", () =>
    Effect.gen(function* () {
      expect(yield* targetsOf("claude-opus-4")).toEqual([{ provider: "anthropic", model: "opus-4", id: "anthropic/opus-4", variant: undefined }])
      expect(yield* targetsOf("claude-sonnet/4.5")).toEqual([{ provider: "anthropic", model: "sonnet/4.5", id: "anthropic/sonnet/4.5", variant: undefined }])
      expect(yield* targetsOf("o4-mini")).toEqual([{ provider: "local", model: "small-o4", id: "local/small-o4", variant: undefined }])
    })
  )

  it.effect("the most specific (longest) glob wins whatever the order in the config", () =>
    Effect.gen(function* () {
      expect(yield* targetsOf("claude-3-haiku")).toEqual([{ provider: "local", model: "legacy-haiku", id: "local/legacy-haiku", variant: undefined }])
      const reversed = Catalog.make(configOf({ ...document, aliases: { "claude-3-*": "local/legacy-*", "claude-*": "anthropic/*" } }))
      const targets = yield* reversed.resolve("claude-3-haiku", reversed.app("default"))
      expect(targets.targets.map((t) => t.id)).toEqual(["local/legacy-haiku"])
    })
  )

  it("a glob alias passes any captured text on verbatim", () => {
    const captured = fc.string({
      unit: fc.oneof(fc.string({ unit: "grapheme", minLength: 1, maxLength: 1 }), fc.constantFrom("$", "&", "$&", "$'", "$`", "$$", "/", "-")),
      minLength: 1,
      maxLength: 12
    }).filter((s) => !s.includes("#") && !s.startsWith("3-") && !s.endsWith("-mini"))
    fc.assert(
      fc.property(captured, (x) => {
        const resolved = Effect.runSync(Effect.either(resolve(`claude-${x}`)))
        expect(Either.isRight(resolved) && resolved.right.targets.map((t) => [t.provider, t.model])).toEqual([["anthropic", x]])
      })
    )
  })

  it.effect("an alias with fallback targets keeps their order", () =>
    Effect.gen(function* () {
      expect((yield* targetsOf("smart")).map((t) => t.id)).toEqual(["anthropic/opus-4", "openai/gpt-5", "local/llama"])
    })
  )

  it.effect("a #variant on an alias applies to its targets; a target's own variant is kept unless the caller names one", () =>
    Effect.gen(function* () {
      const configured = Catalog.make(configOf({ ...document, aliases: { pair: { targets: ["anthropic/opus-4", "openai/gpt-5"] } } }))
      const pair = yield* configured.resolve("pair#high", configured.app("default"))
      expect(pair.requested).toBe("pair#high")
      expect(pair.targets.map((t) => [t.id, t.variant, t.reasoningEffort])).toEqual([
        ["anthropic/opus-4", "high", "high"],
        ["openai/gpt-5", "high", "high"]
      ])
      const deep = yield* resolve("deep")
      expect(deep.targets[0]).toMatchObject({ id: "anthropic/opus-4", variant: "high", reasoningEffort: "high", params: { budget: 32000 } })
      expect((yield* resolve("deep#low")).targets[0]).toMatchObject({ variant: "low", reasoningEffort: "low" })
      expect((yield* resolve("claude-opus-4#low")).targets[0]).toMatchObject({ id: "anthropic/opus-4", variant: "low" })
    })
  )

  it.effect("a variant some target lacks is 400 invalid_model_variant (also for a fallback target)", () =>
    Effect.gen(function* () {
      expectError(yield* failureOf("anthropic/opus-4#turbo"), 400, "invalid_model_variant")
      expectError(yield* failureOf("local/llama#high"), 400, "invalid_model_variant")
      expectError(yield* failureOf("smart#low"), 400, "invalid_model_variant")
    })
  )

  it.effect("an unknown model is 404 model_not_found", () =>
    Effect.gen(function* () {
      for (const model of ["nope", "nope/gpt-5", "/gpt-5", "openai/", "fast2", "claude-", ""]) {
        expectError(yield* failureOf(model), 404, "model_not_found")
      }
    })
  )

  it.effect("allowedModels globs gate ids, aliases and alias targets with 403 model_not_allowed", () =>
    Effect.gen(function* () {
      expect((yield* targetsOf("openai/gpt-5", undefined, teamA)).map((t) => t.id)).toEqual(["openai/gpt-5"])
      expect((yield* targetsOf("openai/gpt-5#high", undefined, teamA)).map((t) => t.variant)).toEqual(["high"])
      expect((yield* targetsOf("fast", undefined, teamA)).map((t) => t.id)).toEqual(["openai/gpt-5"])
      // an alias not listed itself is allowed when every target is
      expect((yield* targetsOf("o4-mini", undefined, teamA)).map((t) => t.id)).toEqual(["local/small-o4"])
      for (const model of ["anthropic/opus-4", "smart", "claude-opus-4", "deep", "local/llama"]) {
        expectError(yield* failureOf(model, undefined, teamA), 403, "model_not_allowed")
      }
      // an unknown model stays a 404 for a restricted app
      expectError(yield* failureOf("nope", undefined, teamA), 404, "model_not_found")
    })
  )

  it.effect("reasoningEffort picks a variant only when the model has one of that name", () =>
    Effect.gen(function* () {
      expect((yield* resolve("anthropic/opus-4", { reasoningEffort: "high" })).targets[0]).toMatchObject({ variant: "high", reasoningEffort: "high" })
      expect((yield* resolve("anthropic/opus-4", { reasoningEffort: "medium" })).targets[0].variant).toBeUndefined()
      expect((yield* resolve("local/llama", { reasoningEffort: "high" })).targets[0].variant).toBeUndefined()
      // the id's variant wins over the request's level
      expect((yield* resolve("anthropic/opus-4#low", { reasoningEffort: "high" })).targets[0].variant).toBe("low")
      // per target: the fallback without the level runs without a variant
      const smart = yield* resolve("smart", { reasoningEffort: "low" })
      expect(smart.targets.map((t) => t.variant)).toEqual(["low", undefined, undefined])
    })
  )

  it.effect("with nearestAbove a missing level takes the nearest variant above it, or the highest", () =>
    Effect.gen(function* () {
      expect((yield* resolve("anthropic/opus-4", { reasoningEffort: "medium", nearestAbove: true })).targets[0].variant).toBe("high")
      expect((yield* resolve("anthropic/opus-4", { reasoningEffort: "minimal", nearestAbove: true })).targets[0].variant).toBe("low")
      expect((yield* resolve("anthropic/opus-4", { reasoningEffort: "max", nearestAbove: true })).targets[0].variant).toBe("high")
      expect((yield* resolve("local/llama", { reasoningEffort: "max", nearestAbove: true })).targets[0].variant).toBeUndefined()
    })
  )
})

describe("Catalog.list", () => {
  it("lists configured models, exact aliases and what glob aliases route among declared models, filtered by allowedModels", () => {
    // `claude-*` routes anthropic/opus-4 as claude-opus-4; the other globs route no declared model
    expect(catalog.list(open).map((m) => m.id)).toEqual(["anthropic/opus-4", "openai/gpt-5", "fast", "deep", "smart", "claude-opus-4"])
    expect(catalog.list(open).find((m) => m.id === "deep")).toEqual({ id: "deep", displayName: "deep", ownedBy: "gateway", contextLimit: 200000 })
    expect(catalog.list(teamA).map((m) => m.id)).toEqual(["openai/gpt-5", "fast"])
  })
})
