// The example brain in JavaScript: the same brain as `example/src/lib.rs` (a component)
// and `example.rhai`. See that file for what it does.

const me = whoami();
subscribe_lifecycle();
const names = { [subscribe_agent("mur")]: "mur" };
memory_set("whoami", me);
const runs = (parseInt(memory_get("runs") ?? "0", 10) || 0) + 1;
memory_set("runs", String(runs));
const timers = {};
log("info", `${me} is up (run ${runs})`);

run: while (true) {
  let envelope;
  try { envelope = recv(); } catch (error) { continue; }
  switch (envelope.kind) {
    case "message": {
      const text = envelope.value;
      const from = names[envelope.id] ?? "";
      if (from === "mur") {
        const [command = "", first = "", ...more] = text.split(" ");
        const rest = more.join(" ");
        switch (command) {
          case "subscribe": names[subscribe_agent(first)] = first; memory_set("subscribed", first); break;
          case "send": try { send_agent(first, rest); } catch (error) { memory_set("send_error", error.message); } break;
          case "timer": timers[wait_for(parseInt(first, 10))] = rest; break;
          case "cancel":
            for (const id of Object.keys(timers)) {
              if (timers[id] === first) { cancel_timer(id); delete timers[id]; break; }
            }
            break;
          case "remember": memory_set(first, rest); break;
          default: log("warn", `unknown command: ${text}`);
        }
      } else {
        memory_set(`from:${from}`, text);
        if (text.startsWith("ping")) { try { send_agent(from, `pong ${me}`); } catch (error) {} }
      }
      break;
    }
    case "timer": {
      const label = timers[envelope.id] ?? "";
      delete timers[envelope.id];
      memory_set(`timer:${label}`, "fired");
      break;
    }
    case "reload": memory_set("last_lifecycle", "reload"); break run;
    case "shutdown": memory_set("last_lifecycle", "shutdown"); break run;
    case "error": memory_set("lifecycle_error", envelope.value); break;
  }
}
