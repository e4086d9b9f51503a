/**
 * Reasoning text that names a tool by an internal placeholder id is rewritten to the tool's name
 * (spec 6.2): the `functions.<name>:<n>` call placeholders some chat-completions models write, and
 * tool-call ids the conversation knows (`toolu_…`, `call_…`) whose tool name is known.
 */
const functionPlaceholder = /\bfunctions\.([A-Za-z0-9_-]{1,128}):\d+\b/g

export const makePlaceholderRewriter = (knownIds: ReadonlyMap<string, string>) => {
  const ids = [...knownIds.keys()].filter((id) => id.length >= 6).sort((a, b) => b.length - a.length)
  const escaped = ids.map((id) => id.replace(/[.*+?^${}()|[\]\\]/g, "\\$&"))
  const known = escaped.length === 0 ? undefined : new RegExp(escaped.join("|"), "g")
  return (text: string): string => {
    let out = text.replace(functionPlaceholder, (_, name: string) => name)
    if (known !== undefined) out = out.replace(known, (id) => knownIds.get(id) ?? id)
    return out
  }
}
