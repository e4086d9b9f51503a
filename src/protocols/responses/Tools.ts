import { Either } from "effect"
import { flattenName } from "../../domain/ToolNames.js"
import type { JsonSchema, ToolChoice, ToolDefinition } from "../../domain/Canonical.js"
import { Errors, type GatewayError } from "../../domain/Errors.js"
import { decodeAt } from "../Decode.js"
import { CustomTool, FunctionTool, NamespaceTool, type ResponsesRequest } from "./Schema.js"

/**
 * Responses-style tools (spec 4.1 "Tool handling"): functions as they are, namespaces flattened to
 * `<namespace>__<name>`, custom (freeform) tools as a function with one string argument `input`,
 * hosted tools dropped or refused, `additional_tools` items joined.
 */

/** A tool as the caller knows it, behind the name offered to the model. */
export interface ToolEntry {
  /** the name the model sees */
  readonly flat: string
  readonly name: string
  readonly namespace?: string
  readonly kind: "function" | "custom"
}

export interface ToolPlan {
  readonly tools: ReadonlyArray<ToolDefinition>
  /** by the name the model sees */
  readonly entries: ReadonlyMap<string, ToolEntry>
  /** tools echoed in the response: those sent, additional_tools included, hosted ones left out */
  readonly echo: ReadonlyArray<Readonly<Record<string, unknown>>>
  /** hosted tool types left out (`x-gateway-dropped-tools`) */
  readonly droppedHosted: ReadonlyArray<string>
}

const hostedTypes = ["web_search", "web_search_preview", "file_search", "code_interpreter", "image_generation", "mcp"]
/** Hosted types, dated variants included (`web_search_preview_2025_03_11`). */
export const isHosted = (type: string) => hostedTypes.some((h) => type === h || type.startsWith(`${h}_20`))

export { flattenName }

const customParameters = (tool: typeof CustomTool.Type): JsonSchema => {
  const format = tool.format
  const grammar =
    format !== null && format !== undefined && format.type === "grammar" && typeof format.definition === "string"
      ? `Input in ${typeof format.syntax === "string" ? format.syntax : "grammar"} syntax:\n${format.definition}`
      : "Free-form text input."
  return { type: "object", properties: { input: { type: "string", description: grammar } }, required: ["input"], additionalProperties: false }
}

const customDescription = (tool: typeof CustomTool.Type): string => {
  const format = tool.format
  const base = tool.description ?? ""
  if (format === null || format === undefined || format.type !== "grammar" || typeof format.definition !== "string") return base
  return `${base}${base ? "\n\n" : ""}Call this tool with one string argument \`input\` that follows this ${typeof format.syntax === "string" ? format.syntax : ""} grammar:\n${format.definition}`
}

interface Collected {
  readonly entry: ToolEntry
  readonly definition: ToolDefinition
}

type Result<A> = Either.Either<A, GatewayError>

const decodeFunction = decodeAt(FunctionTool)
const decodeCustom = decodeAt(CustomTool)
const decodeNamespace = decodeAt(NamespaceTool)

/** One list of tools (`tools`, or one additional_tools item) into entries; hosted ones reported. */
const collect = (list: ReadonlyArray<Readonly<Record<string, unknown>>>, at: string, hosted: Array<string>): Result<Array<Collected>> => {
  const out: Array<Collected> = []
  for (let i = 0; i < list.length; i++) {
    const raw = list[i]
    const where = `${at}.${i}`
    const type = typeof raw.type === "string" ? raw.type : ""
    if (type === "function") {
      const tool = decodeFunction(raw, where)
      if (Either.isLeft(tool)) return Either.left(tool.left)
      const t = tool.right
      out.push({
        entry: { flat: t.name, name: t.name, kind: "function" },
        definition: { name: t.name, ...(t.description ? { description: t.description } : {}), parameters: t.parameters ?? { type: "object", properties: {} } }
      })
    } else if (type === "custom") {
      const tool = decodeCustom(raw, where)
      if (Either.isLeft(tool)) return Either.left(tool.left)
      const t = tool.right
      const description = customDescription(t)
      out.push({ entry: { flat: t.name, name: t.name, kind: "custom" }, definition: { name: t.name, ...(description ? { description } : {}), parameters: customParameters(t) } })
    } else if (type === "namespace") {
      const ns = decodeNamespace(raw, where)
      if (Either.isLeft(ns)) return Either.left(ns.left)
      for (let j = 0; j < ns.right.tools.length; j++) {
        const inner = ns.right.tools[j]
        const innerAt = `${where}.tools.${j}`
        const innerType = typeof inner.type === "string" ? inner.type : ""
        if (innerType !== "function" && innerType !== "custom") {
          return Either.left(Errors.invalidRequest("unsupported_parameter", `${innerAt}.type: only function and custom tools can be in a namespace`, { param: `${innerAt}.type` }))
        }
        const members = collect([inner], `${where}.tools`, hosted)
        if (Either.isLeft(members)) return members
        for (const m of members.right) {
          const flat = flattenName(ns.right.name, m.entry.name)
          out.push({ entry: { ...m.entry, flat, namespace: ns.right.name }, definition: { ...m.definition, name: flat } })
        }
      }
    } else if (isHosted(type)) {
      hosted.push(type)
    } else {
      return Either.left(Errors.invalidRequest("unsupported_parameter", `${where}.type: tool type '${type}' is not supported`, { param: `${where}.type` }))
    }
  }
  return Either.right(out)
}

const duplicate = (name: string, at: string) => Errors.invalidRequest("invalid_request_error", `Duplicate tool name: ${name}`, { param: at })

/**
 * Join `tools` and every `additional_tools` list: a name twice within one list or in `tools` and an
 * additional list is a duplicate; across additional lists the newest declaration wins.
 */
export const planTools = (
  tools: ReadonlyArray<Readonly<Record<string, unknown>>>,
  additional: ReadonlyArray<{ readonly tools: ReadonlyArray<Readonly<Record<string, unknown>>>; readonly at: string }>,
  options: { readonly onHostedTools: "drop" | "refuse"; readonly maxTools: number }
): Result<ToolPlan> => {
  const hosted: Array<string> = []
  const base = collect(tools, "tools", hosted)
  if (Either.isLeft(base)) return Either.left(base.left)
  const byFlat = new Map<string, Collected>()
  const echo: Array<Readonly<Record<string, unknown>>> = tools.filter((t) => !isHosted(String(t.type)))
  for (const c of base.right) {
    if (byFlat.has(c.entry.flat)) return Either.left(duplicate(c.entry.name, "tools"))
    byFlat.set(c.entry.flat, c)
  }
  const fromTools = new Set(byFlat.keys())
  for (const list of additional) {
    const items = collect(list.tools, list.at, hosted)
    if (Either.isLeft(items)) return Either.left(items.left)
    const seen = new Set<string>()
    for (const c of items.right) {
      if (seen.has(c.entry.flat) || fromTools.has(c.entry.flat)) return Either.left(duplicate(c.entry.name, list.at))
      seen.add(c.entry.flat)
      byFlat.set(c.entry.flat, c) // the newest declaration wins
    }
    echo.push(...list.tools.filter((t) => !isHosted(String(t.type))))
  }
  if (hosted.length > 0 && (options.onHostedTools === "refuse" || byFlat.size === 0)) {
    const why = options.onHostedTools === "refuse" ? "hosted tools are refused for this app" : "hosted tools are not run by this gateway and no function tool was sent"
    return Either.left(Errors.invalidRequest("unsupported_parameter", `tools: ${hosted[0]}: ${why}`, { param: "tools" }))
  }
  if (byFlat.size > options.maxTools) {
    return Either.left(Errors.invalidRequest("too_many_tools", `tools: at most ${options.maxTools} tools are allowed (a namespace counts each of its tools)`, { param: "tools" }))
  }
  const collected = [...byFlat.values()]
  return Either.right({
    tools: collected.map((c) => c.definition),
    entries: new Map(collected.map((c) => [c.entry.flat, c.entry])),
    echo,
    droppedHosted: [...new Set(hosted)]
  })
}

/** The canonical tool choice; unsupported forms are refused with `param: tool_choice`. */
export const planToolChoice = (choice: ResponsesRequest["tool_choice"], plan: ToolPlan, hostTool?: (name: string) => boolean): Result<ToolChoice> => {
  if (choice === null || choice === undefined) return Either.right({ type: "auto" })
  if (typeof choice === "string") return Either.right({ type: choice })
  if (choice.type !== "function" && choice.type !== "custom") {
    return Either.left(Errors.invalidRequest("unsupported_parameter", `tool_choice: type '${choice.type}' is not supported`, { param: "tool_choice" }))
  }
  if (choice.name === undefined) return Either.left(Errors.invalidRequest("invalid_request_error", "tool_choice.name: is required", { param: "tool_choice.name" }))
  const flat = choice.namespace !== undefined ? flattenName(choice.namespace, choice.name) : choice.name
  const entry = plan.entries.get(flat)
  // a host tool of the app, undeclared: HostTools checks it is offered
  if (entry === undefined && choice.type === "function" && choice.namespace === undefined && hostTool?.(flat) === true) return Either.right({ type: "tool", name: flat })
  if (entry === undefined || entry.kind !== choice.type) {
    return Either.left(Errors.invalidRequest("invalid_request_error", `tool_choice.name: no ${choice.type} tool named ${choice.name}`, { param: "tool_choice.name" }))
  }
  return Either.right({ type: "tool", name: flat })
}
