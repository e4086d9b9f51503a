import { isAttributionBlock, type CanonicalRequest, type Message, type ToolDefinition } from "../../domain/Canonical.js"
import { planCache, type Slot, type Ttl } from "./Cache.js"

/**
 * Apply the prompt-caching rules (spec 4.2, `planCache`) to a decoded Messages request: every
 * block that can carry a breakpoint becomes a slot (tools, system parts, message blocks), the plan
 * decides which carry one and with which TTL, and the parts are rewritten accordingly.
 */
/** Text, image, document and tool_result blocks can carry a breakpoint. */
const isCacheable = (part: Message["parts"][number]): part is Extract<Message["parts"][number], { readonly cache?: unknown }> =>
  part.type === "text" || part.type === "image" || part.type === "file" || part.type === "tool_result"

export const applyCaching = (request: CanonicalRequest): CanonicalRequest => {
  const slots: Array<Slot> = []
  const toolSlot = request.tools.length - 1
  request.tools.forEach((_, i) => slots.push({ kind: "tool", cacheable: true, ...(i === toolSlot ? { role: "lastTool" as const } : {}) }))
  // a client's attribution block (first) takes no gateway breakpoint: the first system role is the part after it
  const firstSystem = isAttributionBlock(request.system[0]) ? 1 : 0
  const lastSystem = request.system.length - 1
  request.system.forEach((part, i) =>
    slots.push({
      kind: "system",
      cacheable: true,
      ...(part.cache !== undefined ? { caller: part.cache.ttl } : {}),
      ...(i === firstSystem ? { role: "firstSystem" as const } : i === lastSystem && i > firstSystem ? { role: "lastSystem" as const } : {})
    })
  )
  // the tail: the last text part of the last message
  const lastMessage = request.messages.length - 1
  let tail = -1
  request.messages.forEach((message, m) => {
    message.parts.forEach((part) => {
      const cacheable = isCacheable(part)
      if (m === lastMessage && part.type === "text") tail = slots.length
      slots.push({ kind: "message", cacheable, ...(cacheable && "cache" in part && part.cache !== undefined ? { caller: part.cache.ttl } : {}) })
    })
  })
  if (tail >= 0) slots[tail] = { ...slots[tail], role: "tail" }
  const toolsReachModel = request.tools.length > 0 && request.toolChoice.type !== "none"
  const { ttls } = planCache(slots, { toolsReachModel })
  let at = 0
  const ttlAt = (): Ttl | undefined => ttls[at++]
  const withTtl = <A extends { readonly cache?: unknown }>(part: A, ttl: Ttl | undefined): A => {
    if (ttl === undefined) {
      if (part.cache === undefined) return part
      const { cache: _cache, ...rest } = part
      return rest as A
    }
    return { ...part, cache: { ttl } }
  }
  const tools: Array<ToolDefinition> = request.tools.map((tool) => withTtl(tool, ttlAt()))
  const system = request.system.map((part) => withTtl(part, ttlAt()))
  // one slot per part, in order: every part takes its TTL, only cacheable ones carry it
  const messages = request.messages.map(
    (message) =>
      ({
        ...message,
        parts: message.parts.map((part) => {
          const ttl = ttlAt()
          return isCacheable(part) ? withTtl(part, ttl) : part
        })
      }) as Message
  )
  return { ...request, tools, system, messages }
}
