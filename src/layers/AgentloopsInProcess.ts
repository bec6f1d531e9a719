/**
 * Agentloops that run in-process as TypeScript: the official loop under the id `official`, plus
 * any loops an embedder or a test registers. [4/7] adds WebAssembly loops by content hash.
 */
import { Effect, Layer } from "effect"
import { failure } from "../domain/Failure.js"
import { officialLoop } from "../loops/official.js"
import { AgentloopFailed, Agentloops, type AgentloopShape, type AgentloopsShape } from "../services/Agentloop.js"

export const OFFICIAL = "official"

export const make = (loops: Readonly<Record<string, AgentloopShape>> = {}): AgentloopsShape => {
  const all = new Map<string, AgentloopShape>([[OFFICIAL, officialLoop], ...Object.entries(loops)])
  return {
    resolve: (id) => {
      const loop = all.get(id)
      return loop
        ? Effect.succeed(loop)
        : Effect.fail(new AgentloopFailed({ failure: failure("agentloop_failed", `no agentloop ${JSON.stringify(id)}`) }))
    },
    has: (id) => Effect.sync(() => all.has(id))
  }
}

export const layer = (loops?: Readonly<Record<string, AgentloopShape>>) => Layer.succeed(Agentloops, make(loops))
