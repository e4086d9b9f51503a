/**
 * Messages beta flags (`anthropic-beta`). Against a native Messages upstream the gateway forwards
 * only the client flags that change how the model behaves, never those that need a server feature
 * it does not provide (Files API, code execution, MCP client, web fetch, context management,
 * OAuth, ...). `providers.<name>.betas` replaces this list.
 */
export const defaultBetas: ReadonlyArray<string> = [
  "interleaved-thinking-2025-05-14",
  "context-1m-2025-08-07",
  "fine-grained-tool-streaming-2025-05-14",
  "token-efficient-tools-2025-02-19",
  "output-128k-2025-02-19"
]

/** A comma-separated flag list as its flags, trimmed, empty entries left out. */
export const splitBetas = (value: string | undefined): Array<string> =>
  value === undefined ? [] : value.split(",").map((flag) => flag.trim()).filter((flag) => flag !== "")

/**
 * The client's flags from both spellings (`anthropic-beta`, `messages-beta`); repeated headers
 * arrive joined with commas.
 */
export const clientBetas = (headers: Readonly<Record<string, string | undefined>>): ReadonlyArray<string> => {
  const flags = [...splitBetas(headers["anthropic-beta"]), ...splitBetas(headers["messages-beta"])]
  return [...new Set(flags)]
}

/**
 * The `anthropic-beta` value sent upstream: the operator's configured flags, then the client's
 * flags on the allow-list; undefined when there are none.
 */
export const upstreamBetas = (configured: string | undefined, client: ReadonlyArray<string> | undefined, allowed: ReadonlyArray<string>): string | undefined => {
  const flags = new Set(splitBetas(configured))
  for (const flag of client ?? []) if (allowed.includes(flag)) flags.add(flag)
  return flags.size === 0 ? undefined : [...flags].join(",")
}
