import { Context, Effect, Either, Layer } from "effect"
import { aliasTargets, type GatewayConfig, type ModelConfig, type RoutingStrategy } from "../../Config.js"
import { isAttributionBlock, type TextPart } from "../../domain/Canonical.js"
import { Errors, GatewayError } from "../../domain/Errors.js"
import { globCapture, globMatch, parseModelId, pickVariant, splitProvider } from "../../domain/ModelId.js"
import type { ProviderTarget } from "../runner/ProviderClient.js"

/** The per-app options in force: the app's own, else the global ones. */
export interface AppSettings {
  readonly name: string
  /** the app's system policy, first in every system prompt */
  readonly system?: string
  readonly maxChoices: number
  readonly onHostedTools: "drop" | "refuse"
  readonly reasoningOutput: boolean
  readonly allowedModels?: ReadonlyArray<string>
  readonly filesEnabled: boolean
  readonly maxAgeDays: number
  readonly maxBodyBytes: number
}

/** A requested model id resolved to its targets, in fallback order. */
export interface ResolvedModel {
  /** the id as the caller sent it */
  readonly requested: string
  readonly targets: ReadonlyArray<ProviderTarget>
  /** how to spread calls over the targets, for an alias with a strategy or affinity (none: in the order given) */
  readonly route?: Route
}

/** An alias's routing: its strategy, conversation affinity, and each target's weight (in `targets` order). */
export interface Route {
  /** the alias, for the conversations it has moved */
  readonly alias: string
  readonly strategy: RoutingStrategy
  readonly affinity: boolean
  readonly weights: ReadonlyArray<number>
}

/** An alias as configured: its targets with their weights, and how it routes. */
interface AliasEntry {
  readonly targets: ReadonlyArray<{ readonly model: string; readonly weight: number }>
  readonly strategy: RoutingStrategy
  readonly affinity: boolean
}

export interface ResolveOptions {
  /** the request's reasoning level; picks a variant when the id carries none */
  readonly reasoningEffort?: string
  /** Messages/Gemini rule: a missing level takes the nearest variant above it, or the highest */
  readonly nearestAbove?: boolean
}

/** One entry of a model list: a `<provider>/<model>` id or an alias. */
export interface ModelEntry {
  readonly id: string
  /** the model's `label`, else its id */
  readonly displayName: string
  readonly ownedBy: string
  readonly contextLimit?: number
}

/** Models, aliases (exact and glob), variants and per-app model permissions. */
export class Catalog extends Context.Tag("gateway/Catalog")<
  Catalog,
  {
    readonly resolve: (model: string, app: AppSettings, options?: ResolveOptions) => Effect.Effect<ResolvedModel, GatewayError>
    readonly list: (app: AppSettings) => ReadonlyArray<ModelEntry>
    /** the system prompt that reaches the model: app policy, then an agent's prompt in place of the caller's, or the caller's plus a skill's content */
    readonly system: (model: string, app: AppSettings, caller: ReadonlyArray<TextPart>) => ReadonlyArray<TextPart>
    readonly app: (name: string) => AppSettings
  }
>() {
  static readonly make = (config: GatewayConfig) => {
    const exactAliases = new Map<string, AliasEntry>()
    const globAliases: Array<{ readonly pattern: string; readonly entry: AliasEntry }> = []
    for (const [name, value] of Object.entries(config.aliases)) {
      const entry: AliasEntry = {
        targets: aliasTargets(value),
        strategy: typeof value === "string" ? "ordered" : (value.strategy ?? "ordered"),
        affinity: typeof value !== "string" && value.affinity === "conversation"
      }
      if (name.includes("*")) globAliases.push({ pattern: name, entry })
      else exactAliases.set(name, entry)
    }
    // the most specific glob (longest literal text) wins
    globAliases.sort((a, b) => b.pattern.length - a.pattern.length)

    const modelConfig = (provider: string, model: string): ModelConfig | undefined => config.providers[provider]?.models?.[model]

    const appCache = new Map<string, AppSettings>()
    const app = (name: string): AppSettings => {
      const cached = appCache.get(name)
      if (cached !== undefined) return cached
      const own = config.apps[name] ?? {}
      const settings: AppSettings = {
        name,
        ...(own.system !== undefined ? { system: own.system } : {}),
        maxChoices: own.maxChoices ?? config.maxChoices,
        onHostedTools: own.onHostedTools ?? "drop",
        reasoningOutput: own.reasoningOutput ?? config.reasoningOutput,
        ...(own.allowedModels !== undefined ? { allowedModels: own.allowedModels } : {}),
        filesEnabled: own.endpoints?.files ?? true,
        maxAgeDays: own.sessions?.maxAgeDays || config.sessions.maxAgeDays || 30,
        maxBodyBytes: Math.min(config.limits.apps[name]?.maxBodyBytes ?? config.limits.maxBodyBytes, config.limits.maxBodyBytes)
      }
      appCache.set(name, settings)
      return settings
    }

    const toTarget = (
      requested: string,
      targetId: string,
      idVariant: string | undefined,
      options: ResolveOptions | undefined
    ): ProviderTarget | GatewayError => {
      const parsed = parseModelId(targetId)
      const split = splitProvider(parsed.base)
      const provider = split === undefined ? undefined : config.providers[split.provider]
      if (split === undefined || provider === undefined) {
        return Errors.notFound("model_not_found", `The model '${requested}' does not exist`, { param: "model" })
      }
      const mc = modelConfig(split.provider, split.model)
      const variants = Object.keys(mc?.variants ?? {})
      let variant = idVariant ?? parsed.variant
      if (variant !== undefined && !variants.includes(variant)) {
        return Errors.invalidRequest("invalid_model_variant", `The model '${requested}' has no variant '${variant}'${variants.length ? ` (variants: ${variants.join(", ")})` : ""}`, {
          param: "model"
        })
      }
      if (variant === undefined && options?.reasoningEffort !== undefined) {
        variant = pickVariant(variants, options.reasoningEffort, options.nearestAbove === true)
      }
      const variantConfig = variant === undefined ? undefined : mc?.variants?.[variant]
      return {
        provider: split.provider,
        providerType: provider.type,
        model: split.model,
        id: parsed.base,
        ...(variant !== undefined ? { variant } : {}),
        ...(variantConfig?.reasoningEffort !== undefined ? { reasoningEffort: variantConfig.reasoningEffort } : {}),
        ...(variantConfig?.params !== undefined ? { params: variantConfig.params } : {}),
        ...(mc !== undefined ? { modelConfig: mc } : {})
      }
    }

    const allowed = (settings: AppSettings, base: string, targets: ReadonlyArray<ProviderTarget>): boolean => {
      const patterns = settings.allowedModels
      if (patterns === undefined) return true
      if (patterns.some((p) => globMatch(p, base))) return true
      return targets.every((t) => patterns.some((p) => globMatch(p, t.id)))
    }

    // an exact alias, then a configured `<provider>/<model>`, then the most specific glob alias
    const aliasFor = (base: string): AliasEntry | undefined => {
      const exact = exactAliases.get(base)
      if (exact !== undefined) return exact
      const split = splitProvider(base)
      if (split !== undefined && config.providers[split.provider] !== undefined) return { targets: [{ model: base, weight: 1 }], strategy: "ordered", affinity: false }
      for (const glob of globAliases) {
        const captured = globCapture(glob.pattern, base)
        if (captured !== undefined) return { ...glob.entry, targets: glob.entry.targets.map((t) => ({ ...t, model: t.model.replace("*", () => captured) })) }
      }
      return undefined
    }
    const targetIdsFor = (base: string): ReadonlyArray<string> | undefined => aliasFor(base)?.targets.map((t) => t.model)

    const persona = (base: string): { readonly model: string; readonly prompt?: string; readonly content?: string } | undefined => {
      if (base.startsWith("agent/")) return config.agents[base.slice(6)]
      if (base.startsWith("skill/")) return config.skills[base.slice(6)]
      return undefined
    }

    const system = (model: string, settings: AppSettings, caller: ReadonlyArray<TextPart>): ReadonlyArray<TextPart> => {
      const found = persona(parseModelId(model).base)
      if (settings.system === undefined && found === undefined) return caller
      // a client's attribution block stays first: the policy comes right after it
      const lead = isAttributionBlock(caller[0]) ? caller.slice(0, 1) : []
      const rest = lead.length === 0 ? caller : caller.slice(1)
      const policy: Array<TextPart> = settings.system !== undefined ? [...lead, { type: "text", text: settings.system }] : [...lead]
      if (found?.prompt !== undefined) return [...policy, { type: "text", text: found.prompt }]
      if (found?.content !== undefined) return [...policy, ...rest, { type: "text", text: found.content }]
      return [...policy, ...rest]
    }

    /** the next key of each provider with `apiKeys` */
    const turns = new Map<string, number>()

    const resolve = (model: string, settings: AppSettings, options?: ResolveOptions): Effect.Effect<ResolvedModel, GatewayError> => {
      const parsed = parseModelId(model)
      if (parsed.base.startsWith("agent/") || parsed.base.startsWith("skill/")) {
        const found = persona(parsed.base)
        if (found === undefined) {
          const kind = parsed.base.startsWith("agent/") ? "agent" : "skill"
          return Effect.fail(Errors.notFound("model_not_found", `The model '${model}' does not exist: no ${kind} named ${parsed.base.slice(6)}`, { param: "model" }))
        }
        // allowed by its own name, or by the model it runs on
        const granted = settings.allowedModels === undefined || settings.allowedModels.some((p) => globMatch(p, parsed.base))
        const inner = parsed.variant !== undefined ? `${found.model}#${parsed.variant}` : found.model
        return Effect.map(resolve(inner, granted ? { ...settings, allowedModels: undefined } : settings, options), (r) => ({ ...r, requested: model }))
      }
      const { base, variant } = parsed
      const alias = aliasFor(base)
      if (alias === undefined) {
        return Effect.fail(Errors.notFound("model_not_found", `The model '${model}' does not exist`, { param: "model" }))
      }
      // plain code, no Effect per target: this runs on every model request
      const routed = alias.strategy !== "ordered" || alias.affinity
      const targets: Array<ProviderTarget> = []
      const weights: Array<number> = []
      for (const { model: id, weight } of alias.targets) {
        const target = toTarget(model, id, variant, options)
        if (target instanceof GatewayError) return Either.left(target)
        const keys = config.providers[target.provider]?.apiKeys?.length ?? 0
        if (keys === 0) {
          targets.push(target)
          weights.push(weight)
        } else if (routed) {
          // each key its own target with its share of the weight: the strategy spreads over them
          for (let i = 0; i < keys; i++) {
            targets.push({ ...target, keyIndex: i })
            weights.push(weight / keys)
          }
        } else {
          // each key its own target, taken in turn: calls spread evenly over the keys
          const first = (turns.get(target.provider) ?? 0) % keys
          turns.set(target.provider, first + 1)
          for (let i = 0; i < keys; i++) targets.push({ ...target, keyIndex: (first + i) % keys })
        }
      }
      if (!allowed(settings, base, targets)) return Either.left(Errors.permission("model_not_allowed", `The model '${model}' is not available to this key`, { param: "model" }))
      if (!routed) return Either.right({ requested: model, targets })
      return Either.right({ requested: model, targets, route: { alias: base, strategy: alias.strategy, affinity: alias.affinity, weights } })
    }

    /** A list entry for a client-facing id routed first to `<provider>/<model>`: that model's label and context limit. */
    const entryOf = (id: string, ownedBy: string, firstTarget: string | undefined): ModelEntry => {
      const first = firstTarget === undefined ? undefined : splitProvider(parseModelId(firstTarget).base)
      const mc = first === undefined ? undefined : modelConfig(first.provider, first.model)
      return { id, displayName: mc?.label ?? id, ownedBy, ...(mc?.contextLimit !== undefined ? { contextLimit: mc.contextLimit } : {}) }
    }

    /**
     * The ids a glob alias answers among the declared models: each declared model its first target
     * pattern matches, under the name a client sends (`"claude-*": ant/claude-*` lists `claude-opus-4-8`
     * for `ant.models.claude-opus-4-8`). A name an exact alias or a more specific glob takes is left
     * to that entry.
     */
    const globEntries = (): ReadonlyArray<ModelEntry> => {
      const entries: Array<ModelEntry> = []
      for (const { pattern, entry } of globAliases) {
        const target = splitProvider(parseModelId(entry.targets[0].model).base)
        if (target === undefined || !target.model.includes("*")) continue
        for (const model of Object.keys(config.providers[target.provider]?.models ?? {})) {
          const captured = globCapture(target.model, model)
          if (captured === undefined) continue
          const id = pattern.replace("*", () => captured)
          // listed only when the name comes back to this alias (no exact alias, provider id or more specific glob takes it)
          if (exactAliases.has(id) || aliasFor(id)?.targets[0].model !== entry.targets[0].model.replace("*", () => captured)) continue
          entries.push(entryOf(id, "gateway", `${target.provider}/${model}`))
        }
      }
      return entries
    }

    const list = (settings: AppSettings): ReadonlyArray<ModelEntry> => {
      const entries: Array<ModelEntry> = []
      for (const [name, provider] of Object.entries(config.providers)) {
        for (const model of Object.keys(provider.models ?? {})) entries.push(entryOf(`${name}/${model}`, name, `${name}/${model}`))
      }
      for (const [alias, { targets }] of exactAliases) entries.push(entryOf(alias, "gateway", targets[0].model))
      const seen = new Set(entries.map((e) => e.id))
      for (const entry of globEntries()) {
        if (seen.has(entry.id)) continue
        seen.add(entry.id)
        entries.push(entry)
      }
      for (const name of Object.keys(config.agents)) entries.push({ id: `agent/${name}`, displayName: `agent/${name}`, ownedBy: "gateway" })
      for (const name of Object.keys(config.skills)) entries.push({ id: `skill/${name}`, displayName: `skill/${name}`, ownedBy: "gateway" })
      return entries.filter((e) => {
        if (settings.allowedModels === undefined) return true
        const targets = targetIdsFor(e.id) ?? []
        return settings.allowedModels.some((p) => globMatch(p, e.id)) || (targets.length > 0 && targets.every((t) => settings.allowedModels!.some((p) => globMatch(p, parseModelId(t).base))))
      })
    }

    return Catalog.of({ resolve, list, app, system })
  }

  static readonly layer = (config: GatewayConfig) => Layer.sync(Catalog, () => Catalog.make(config))
}
