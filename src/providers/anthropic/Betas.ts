/**
 * Messages beta flags (`anthropic-beta`). Against a native Messages upstream the gateway forwards
 * every client flag except those that need a credential or a server feature this gateway replaces
 * or does not pass on: OAuth sign-in (the gateway holds the upstream key), the Files API (files
 * are the gateway's own, sent inline), the MCP connector and skills (tools are the caller's or the
 * gateway's host tools), code execution, web fetch and computer use (server and client tool types
 * the gateway does not send). An entry names a flag family (`oauth` denies `oauth-2025-04-20`) or,
 * with its date, one flag. `providers.<name>.denyBetas` replaces this list.
 */
export const defaultDeniedBetas: ReadonlyArray<string> = ["oauth", "files-api", "mcp-client", "skills", "code-execution", "web-fetch", "computer-use"]

/** A flag name ending in its date (`oauth-2025-04-20`, `claude-code-20250219`). */
const dated = (entry: string): boolean => /\d{4}-?\d{2}-?\d{2}$/.test(entry)

/**
 * Whether a deny entry names the flag: an entry with its date only that flag, one without also
 * its family (the entry then a `-`: `oauth` names `oauth-2025-04-20`).
 */
const denies = (entry: string, flag: string): boolean => flag === entry || (!dated(entry) && flag.startsWith(entry) && flag.charAt(entry.length) === "-")

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
 * flags the deny-list does not name; undefined when there are none.
 */
export const upstreamBetas = (configured: string | undefined, client: ReadonlyArray<string> | undefined, denied: ReadonlyArray<string>): string | undefined => {
  const flags = new Set(splitBetas(configured))
  for (const flag of client ?? []) if (!denied.some((entry) => denies(entry, flag))) flags.add(flag)
  return flags.size === 0 ? undefined : [...flags].join(",")
}
