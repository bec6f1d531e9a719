// A session with a host tool, from TypeScript or JavaScript: `node examples/quickstart.mjs [baseUrl]`.
// The offline scripted model calls word_count (run here, in this process), then answers; the
// session's Events are printed as they commit. Needs a server (`npm start`) and a build.
import { Schema } from "effect"
import { Brain, tool } from "brain/sdk"

const baseUrl = process.argv[2] ?? "http://127.0.0.1:3210"

const wordCount = tool({
  name: "word_count",
  description: "Counts the words of a text",
  input: Schema.Struct({ text: Schema.String }),
  output: Schema.Struct({ words: Schema.Number }),
  run: async ({ text }, ctx) => {
    await ctx.emit("progress", { counting: text.length }) // committed before the call's outcome
    return { words: text.split(/\s+/).filter(Boolean).length }
  }
})

const brain = new Brain({ baseUrl, token: process.env.BRAIN_API_TOKEN })
try {
  const session = await brain.sessions.create({
    model: {
      provider: "scripted",
      replies: [{ tool_calls: [{ name: "word_count", input: { text: "one two three" } }] }, { text: "That is three words." }]
    },
    tools: [wordCount]
  })
  // Stream the Events while the turn runs.
  const streaming = (async () => {
    for await (const event of session.events(session.summary.last_sequence)) {
      const origin = event.origin ? ` origin=${JSON.stringify(event.origin)}` : ""
      console.log(`event ${event.sequence} ${event.kind} ${JSON.stringify(event.data)}${origin}`)
      if (event.kind === "turn_ended" || event.kind === "turn_failed") break
    }
  })()
  const outcome = await session.send("How many words are in 'one two three'?")
  await streaming
  console.log(`answer ${JSON.stringify(outcome.turn.result)}`)
} finally {
  await brain.close() // closes the host connection; the session stays stored
}
