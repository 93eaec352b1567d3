// The Kotlin binding on the JVM against the real library and Gemma 3 270M, driven by
// crates/bindgen/tests/kotlin.rs. Modes:
//   suite MODEL DIR           every check below; prints "PASS <name>" each, exits 1 on a failure
//   durable-write MODEL DIR   answers a turn in durable session "notes", prints READY, waits
//                             (the Rust test kills the process with SIGKILL)
//   durable-resume MODEL DIR  opens "notes" again: it must resume with the turn it had
package statelm.test

import kotlinx.coroutines.delay
import kotlinx.coroutines.flow.collect
import kotlinx.coroutines.flow.take
import kotlinx.coroutines.flow.toList
import kotlinx.coroutines.runBlocking
import kotlinx.coroutines.withTimeout
import statelm.Engine
import statelm.OsSignals
import statelm.Session
import statelm.userTurn
import statelm.ffi.AppState
import statelm.ffi.GenerationEvent
import statelm.ffi.StatelmException
import statelm.ffi.ThermalState
import kotlin.system.exitProcess

fun check(ok: Boolean, what: () -> String) {
    if (!ok) throw AssertionError(what())
}

fun config(dir: String) =
    "{\"spill_dir\": \"$dir/spill\", \"session_dir\": \"$dir/sessions\", " +
        "\"os_memory_watch\": false, \"pressure_hold_ms\": 500, \"session_capacity\": 1024, " +
        "\"stream_buffer\": 4}"

const val GREEDY = "{\"temperature\": 0, \"max_tokens\": 48}"
const val PROMPT = "{\"prompt\": \"The capital of France is\"}"

fun text(events: List<GenerationEvent>) = events.joinToString("") {
    when (it) {
        is GenerationEvent.Token -> it.text
        is GenerationEvent.Text -> it.text
        else -> ""
    }
}

fun done(events: List<GenerationEvent>) = events.last() as GenerationEvent.Done

suspend fun statsField(engine: Engine, field: String): String {
    val json = engine.stats()
    val m = Regex("\"$field\":(\"[^\"]*\"|[0-9.]+)").find(json) ?: error("no $field in $json")
    return m.groupValues[1].trim('"')
}

suspend fun until(what: String, f: suspend () -> Boolean) {
    repeat(500) {
        if (f()) return
        delay(10)
    }
    throw AssertionError("timed out waiting for $what")
}

suspend fun suite(engine: Engine) {
    check(Engine.tier().contains("\"quant\"")) { Engine.tier() }
    println("PASS tier")

    val s = engine.newSession()
    val events = s.stream(PROMPT, GREEDY).toList()
    check(events.count { it is GenerationEvent.Token } > 0 && events.last() is GenerationEvent.Done) { "$events" }
    val reference = text(events)
    println("PASS stream: ${reference.take(40).replace('\n', ' ')}")

    // Cancelling the collector cancels the generation; the session is free again at once.
    val c = engine.newSession()
    val three = c.stream(PROMPT, "{\"max_tokens\": 100000, \"temperature\": 0}").take(3).toList()
    check(three.size == 3) { "$three" }
    val again = c.respond(userTurn("And Spain?"), GREEDY)
    check(again.isNotEmpty()) { "nothing after a cancel" }
    println("PASS cancel")

    // A memory warning in the middle of a generation: the answer says it was trimmed (or its
    // cache evicted) and goes on to Done.
    val w = engine.newSession()
    val seen = mutableListOf<GenerationEvent>()
    var warned = false
    w.stream(PROMPT, "{\"temperature\": 0, \"max_tokens\": 64, \"logit_bias\": {\"1\": -1e9, \"106\": -1e9}}")
        .collect { e ->
            seen.add(e)
            if (!warned && seen.count { it is GenerationEvent.Token } == 8) {
                warned = true
                OsSignals(engine).onTrimMemory(10) // TRIM_MEMORY_RUNNING_LOW: a warning
            }
        }
    check(seen.any { it is GenerationEvent.ContextTrimmed || it is GenerationEvent.CacheEvicted }) { "$seen" }
    check(done(seen).stopReason == "max_tokens") { "${done(seen)}" }
    engine.memoryWarning(statelm.ffi.MemoryLevel.NORMAL)
    println("PASS memory warning")

    // Background, then foreground: the session goes to disk, the answer pauses, then goes on
    // unchanged.
    val b = engine.newSession()
    val bg = mutableListOf<GenerationEvent>()
    val signals = OsSignals(engine)
    var backgrounded = false
    b.stream(PROMPT, GREEDY).collect { e ->
        bg.add(e)
        if (!backgrounded && bg.count { it is GenerationEvent.Token } == 5) {
            backgrounded = true
            signals.onStop()
            until("the background") { statsField(engine, "lifecycle") == "background" }
            val held = statsField(engine, "state_bytes_total")
            check(held == "0") { "state bytes in the background: $held" }
            signals.onStart()
        }
    }
    check(text(bg) == reference) { "after the background: ${text(bg)} != $reference" }
    val spilled = bg.indexOfFirst { it is GenerationEvent.Spilled }
    val restored = bg.indexOfFirst { it is GenerationEvent.Restored }
    check(spilled >= 0 && restored > spilled) { "$bg" }
    println("PASS background and foreground")

    // Thermal: the thread count follows, visible in the stats.
    signals.onThermalStatus(4) // THERMAL_STATUS_CRITICAL
    until("one thread") { statsField(engine, "threads") == "1" && statsField(engine, "thermal") == "critical" }
    check(s.respond(userTurn("Why?"), GREEDY).isNotEmpty()) { "no answer when hot" }
    signals.onThermalStatus(0)
    until("nominal") { statsField(engine, "thermal") == "nominal" }
    println("PASS thermal")

    // Typed errors.
    try {
        s.respond(PROMPT, "{\"temperature\": \"hot\"}")
        throw AssertionError("bad params accepted")
    } catch (e: StatelmException.Failed) {
        check(e.status == "STATELM_ERR_INVALID_ARGUMENT" && e.reason.contains("params")) { "$e" }
    }
    println("PASS typed errors")

    // Structured output through params.
    val digits = s.respond(userTurn("A number?"), "{\"temperature\": 0, \"grammar\": {\"regex\": \"[0-9]{3}\"}}")
    check(Regex("[0-9]{3}").matches(digits)) { digits }
    println("PASS structured output: $digits")
}

fun main(args: Array<String>) = runBlocking {
    val (mode, model, dir) = args
    try {
        Engine.load(model, config(dir)).use { engine ->
            when (mode) {
                "suite" -> suite(engine)
                "durable-write" -> {
                    val s = engine.openSession("notes")
                    val answer = s.respond(PROMPT, GREEDY)
                    println("READY ${answer.length}")
                    System.out.flush()
                    delay(600_000) // killed here
                }
                "durable-resume" -> {
                    val s = engine.openSession("notes")
                    val events = withTimeout(120_000) { s.stream(userTurn("And Spain?"), GREEDY).toList() }
                    check(events.any { it is GenerationEvent.Resumed }) { "$events" }
                    check(done(events).json.contains("\"cached_tokens\"")) { done(events).json }
                    println("PASS durable resume: ${events.first { it is GenerationEvent.Resumed }}")
                }
                else -> error("unknown mode $mode")
            }
        }
    } catch (e: Throwable) {
        System.err.println("FAIL: $e")
        e.printStackTrace()
        exitProcess(1)
    }
    println("DONE $mode")
}
