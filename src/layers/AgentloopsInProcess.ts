/**
 * Agentloops that run in-process as TypeScript: the official loop under the id `official`, plus
 * any loops an embedder or a test registers. The WebAssembly host adds loops by content hash.
 */
import * as crypto from "node:crypto"
import * as fs from "node:fs"
import * as path from "node:path"
import { Effect, Layer } from "effect"
import { failure } from "../domain/Failure.js"
import { officialLoop } from "../loops/official.js"
import { AgentloopFailed, AgentloopRejected, Agentloops, AgentloopStoreFailed, type AgentloopShape, type AgentloopsShape } from "../services/Agentloop.js"

export const OFFICIAL = "official"

/** Where admitted modules are kept: in memory for tests, or under the data directory. */
export interface ModuleStore {
  readonly has: (id: string) => boolean
  readonly put: (id: string, bytes: Uint8Array) => void
}

export const memoryModules = (): ModuleStore => {
  const modules = new Map<string, Uint8Array>()
  return { has: (id) => modules.has(id), put: (id, bytes) => void modules.set(id, bytes) }
}

/** Modules as `{dir}/{sha256}.wasm`, written atomically (tmp, fsync, rename, directory fsync). */
export const fileModules = (dir: string): ModuleStore => ({
  has: (id) => /^[0-9a-f]{64}$/.test(id) && fs.existsSync(path.join(dir, `${id}.wasm`)),
  put: (id, bytes) => {
    fs.mkdirSync(dir, { recursive: true })
    const file = path.join(dir, `${id}.wasm`)
    if (fs.existsSync(file)) return
    const tmp = `${file}.${process.pid}.tmp`
    const fd = fs.openSync(tmp, "w")
    fs.writeSync(fd, bytes)
    fs.fsyncSync(fd)
    fs.closeSync(fd)
    fs.renameSync(tmp, file)
    const dfd = fs.openSync(dir, "r")
    fs.fsyncSync(dfd)
    fs.closeSync(dfd)
  }
})

const WASM_MAGIC = [0x00, 0x61, 0x73, 0x6d]

export const make = (loops: Readonly<Record<string, AgentloopShape>> = {}, modules: ModuleStore = memoryModules()): AgentloopsShape => {
  const all = new Map<string, AgentloopShape>([[OFFICIAL, officialLoop], ...Object.entries(loops)])
  return {
    resolve: (id) => {
      const loop = all.get(id)
      if (loop) return Effect.succeed(loop)
      const reason = modules.has(id)
        ? `agentloop ${id} is an uploaded WebAssembly module; running uploaded modules arrives with the WebAssembly host`
        : `no agentloop ${JSON.stringify(id)}`
      return Effect.fail(new AgentloopFailed({ failure: failure("agentloop_failed", reason) }))
    },
    has: (id) => Effect.sync(() => all.has(id) || modules.has(id)),
    admit: (bytes) =>
      Effect.suspend((): Effect.Effect<string, AgentloopRejected | AgentloopStoreFailed> => {
        if (bytes.length < 8 || WASM_MAGIC.some((b, i) => bytes[i] !== b)) {
          return Effect.fail(new AgentloopRejected({ reason: "the body is not a WebAssembly module (no \\0asm header)" }))
        }
        const id = crypto.createHash("sha256").update(bytes).digest("hex")
        return Effect.try({
          try: () => {
            modules.put(id, bytes)
            return id
          },
          // The errno, not the message: it would name where the server keeps its files.
          catch: (err) =>
            new AgentloopStoreFailed({ reason: `the module could not be stored: ${(err as NodeJS.ErrnoException).code ?? "error"}` })
        })
      })
  }
}

export const layer = (loops?: Readonly<Record<string, AgentloopShape>>, modules?: ModuleStore) =>
  Layer.succeed(Agentloops, make(loops, modules))
