import { execFileSync, spawnSync } from "node:child_process"
import { randomBytes } from "node:crypto"
import * as fs from "node:fs"
import * as net from "node:net"
import * as os from "node:os"
import * as path from "node:path"

/**
 * A throwaway PostgreSQL server for the tests: `initdb` into a temp dir, password auth on a
 * loopback port, stopped and removed by `stop`. Run as the `postgres` user when this process is
 * root (PostgreSQL refuses to run as root), as the current user otherwise.
 */

export interface PostgresServer {
  /** an admin URL (user postgres, with a password) of the server's `postgres` database */
  readonly url: string
  readonly stop: () => void
}

/** The newest installed server binaries (Debian: /usr/lib/postgresql/<major>/bin), if any. */
export const postgresBin = (): string | undefined => {
  const root = "/usr/lib/postgresql"
  if (!fs.existsSync(root)) return undefined
  const majors = fs
    .readdirSync(root)
    .filter((name) => fs.existsSync(path.join(root, name, "bin", "initdb")))
    .sort((a, b) => Number(b) - Number(a))
  return majors.length === 0 ? undefined : path.join(root, majors[0], "bin")
}

const freePort = () =>
  new Promise<number>((resolve, reject) => {
    const server = net.createServer()
    server.once("error", reject)
    server.listen(0, "127.0.0.1", () => {
      const address = server.address()
      server.close(() => (typeof address === "object" && address !== null ? resolve(address.port) : reject(new Error("no port"))))
    })
  })

export const startPostgres = async (): Promise<PostgresServer> => {
  const bin = postgresBin()
  if (bin === undefined) throw new Error("PostgreSQL server binaries are not installed (Debian: apt-get install postgresql)")
  const root = process.getuid?.() === 0
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), "gw-pg-"))
  const password = randomBytes(12).toString("hex")
  const as = (command: string, args: ReadonlyArray<string>) =>
    root ? execFileSync("runuser", ["-u", "postgres", "--", command, ...args], { stdio: "pipe" }) : execFileSync(command, args, { stdio: "pipe" })
  try {
    fs.writeFileSync(path.join(dir, "pw"), password)
    if (root) execFileSync("chown", ["-R", "postgres", dir])
    as(path.join(bin, "initdb"), ["-D", path.join(dir, "data"), "-U", "postgres", "-A", "scram-sha-256", "--pwfile", path.join(dir, "pw"), "--no-sync"])
    fs.rmSync(path.join(dir, "pw"))
    const port = await freePort()
    const options = `-p ${port} -k ${dir} -c listen_addresses=127.0.0.1 -c fsync=off -c max_connections=300 -c shared_buffers=64MB`
    as(path.join(bin, "pg_ctl"), ["-D", path.join(dir, "data"), "-o", options, "-l", path.join(dir, "log"), "-w", "-t", "60", "start"])
    return {
      url: `postgres://postgres:${password}@127.0.0.1:${port}/postgres`,
      stop: () => {
        spawnSync(root ? "runuser" : path.join(bin, "pg_ctl"), [...(root ? ["-u", "postgres", "--", path.join(bin, "pg_ctl")] : []), "-D", path.join(dir, "data"), "-m", "immediate", "-w", "stop"], {
          stdio: "ignore"
        })
        fs.rmSync(dir, { recursive: true, force: true })
      }
    }
  } catch (error) {
    fs.rmSync(dir, { recursive: true, force: true })
    throw error
  }
}
