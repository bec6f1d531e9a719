#!/usr/bin/env node
// The `brain` command. The journal syncs many session files at once through libuv's threadpool;
// its size is read once, when the pool starts, so it is set here before anything runs.
process.env.UV_THREADPOOL_SIZE ??= "64"
await import("../dist/cli/main.js")
