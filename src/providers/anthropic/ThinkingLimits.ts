import type { CanonicalRequest, Sampling, TextPart } from "../../domain/Canonical.js"
import type { ProviderTarget } from "../Provider.js"
import { thinkingBudget } from "./Request.js"

/**
 * What the native Messages API refuses while thinking is on (`thinking` enabled or adaptive), per
 * Anthropic's extended-thinking guide ("Feature compatibility" / "Sampling parameters"): a forced
 * tool choice (`any` or a named tool), `temperature` other than 1, any `top_k`, and `top_p` below
 * 0.95. The gateway leaves those out instead of passing on a 400.
 */

/** Lowest `top_p` the Messages API takes with thinking on. */
export const thinkingMinTopP = 0.95

/** Whether the request sent for this target has thinking on: a variant's effort, or `thinking` in its params. */
export const thinkingOn = (target: ProviderTarget): boolean => {
  const configured = target.params?.thinking
  if (configured !== undefined) {
    const type = typeof configured === "object" && configured !== null ? (configured as { readonly type?: unknown }).type : undefined
    return type === "enabled" || type === "adaptive"
  }
  return thinkingBudget(target.reasoningEffort) !== undefined
}

/** Sampling params (wire names) the Messages API refuses with thinking on, for these values. */
export const refusedWithThinking = (sampling: Sampling): ReadonlyArray<string> => {
  const refused: Array<string> = []
  if (sampling.temperature !== undefined && sampling.temperature !== 1) refused.push("temperature")
  if (sampling.topP !== undefined && sampling.topP < thinkingMinTopP) refused.push("top_p")
  if (sampling.topK !== undefined) refused.push("top_k")
  return refused
}

/** Sampling params the native Messages API has no field for: never sent. */
const neverSent: ReadonlyArray<string> = ["seed", "presence_penalty", "frequency_penalty"]

/** Sampling params the native upstream would refuse for this request: those it never takes, and with thinking on those above. */
export const refusedParams = (target: ProviderTarget, request: CanonicalRequest): ReadonlyArray<string> => {
  if (!thinkingOn(target)) return neverSent
  const refused = refusedWithThinking(request.sampling)
  return refused.length === 0 ? neverSent : [...neverSent, ...refused]
}

/** The instruction that stands in for a forced tool choice. */
export const toolChoiceInstruction = (choice: CanonicalRequest["toolChoice"]): string | undefined => {
  switch (choice.type) {
    case "required":
      return "Answer by calling one of the tools."
    case "tool":
      return `Answer by calling the tool ${choice.name}.`
    default:
      return undefined
  }
}

/**
 * The request as the native upstream takes it with thinking on: a forced tool choice becomes
 * `auto`, and the choice is kept as an instruction at the end of the system prompt.
 */
export const unforcedToolChoice = (target: ProviderTarget, request: CanonicalRequest): CanonicalRequest => {
  if (request.tools.length === 0 || !thinkingOn(target)) return request
  const instruction = toolChoiceInstruction(request.toolChoice)
  if (instruction === undefined) return request
  const part: TextPart = { type: "text", text: instruction }
  return { ...request, toolChoice: { type: "auto" }, system: [...request.system, part] }
}
