// The player page's terminal: xterm.js (served by the page, loaded before this script) on the
// instance's WebSocket URL (#terminal's data-socket), as nc in a cooked tty would be: the
// instance's bytes are written as they come (binary frames; "\n" starts a new line), what the
// player types is echoed locally and edited (Backspace, Ctrl-U) until Enter sends the line and
// "\n"; Ctrl-D sends the line without it, or, on an empty line, ends the connection; Ctrl-C
// closes it. #terminal-status says whether it is connecting, connected or closed.
(function () {
  "use strict";

  var box = document.getElementById("terminal");
  var status = document.getElementById("terminal-status");
  if (!box || !status) {
    return;
  }
  if (!window.Terminal || !window.WebSocket || !window.TextEncoder) {
    status.textContent = "This browser cannot run the terminal: use one of the commands on the instance's page.";
    return;
  }

  // xterm.js sizes and colours its cells with <style> elements it creates; the page's
  // Content-Security-Policy admits only those that carry the page's nonce, so each gets it.
  var nonce = box.getAttribute("data-style-nonce");
  var createElement = Document.prototype.createElement;
  Document.prototype.createElement = function (name) {
    var e = createElement.apply(this, arguments);
    if (String(name).toLowerCase() === "style") {
      e.nonce = nonce;
    }
    return e;
  };

  var term = new window.Terminal({ convertEol: true, cursorBlink: true, scrollback: 5000, fontSize: 15 });
  term.open(box);
  fit();
  window.addEventListener("resize", fit);

  var encoder = new TextEncoder();
  var line = "";
  var open = false;

  // say shows the connection's state in words, and as #terminal's data-state.
  function say(text, state) {
    status.textContent = text;
    box.setAttribute("data-state", state);
  }

  var ws;
  try {
    ws = new WebSocket(box.getAttribute("data-socket"));
  } catch (e) {
    say("The terminal could not connect: use one of the commands on the instance's page.", "closed");
    return;
  }
  ws.binaryType = "arraybuffer";
  say("Connecting…", "connecting");
  ws.onopen = function () {
    open = true;
    say("Connected", "open");
    term.focus();
  };
  ws.onmessage = function (event) {
    // Text frames are a client's choice, not the gateway's; write them as they are anyway.
    term.write(typeof event.data === "string" ? event.data : new Uint8Array(event.data));
  };
  ws.onclose = function () {
    open = false;
    say("Connection closed", "closed");
    term.write("\r\n\x1b[2m[connection closed]\x1b[0m\r\n");
  };

  function send(text) {
    if (open) {
      ws.send(encoder.encode(text));
    }
  }

  // erase removes n characters before the cursor from the screen.
  function erase(n) {
    for (var i = 0; i < n; i++) {
      term.write("\b \b");
    }
  }

  // input is what the player typed or pasted, one key or a pasted run at a time.
  function input(data) {
    if (data.charAt(0) === "\x1b") {
      return; // arrow and function keys: a cooked tty's line editing has no cursor movement
    }
    Array.from(data).forEach(key);
  }

  function key(c) {
    if (!open) {
      return;
    }
    switch (c) {
      case "\r":
      case "\n":
        term.write("\r\n");
        send(line + "\n");
        line = "";
        return;
      case "\x7f":
      case "\b":
        if (line) {
          var chars = Array.from(line);
          chars.pop();
          line = chars.join("");
          erase(1);
        }
        return;
      case "\x15": // Ctrl-U: kill the line
        erase(Array.from(line).length);
        line = "";
        return;
      case "\x03": // Ctrl-C: nc's SIGINT ends the connection
        term.write("^C");
        ws.close();
        return;
      case "\x04": // Ctrl-D: flush the line, or end of input on an empty one
        if (line) {
          send(line);
          line = "";
        } else {
          ws.close();
        }
        return;
    }
    if (c >= " ") {
      line += c;
      term.write(c);
    }
  }
  term.onData(input);

  // fit gives the terminal as many columns and rows as its box holds, from the width and height
  // of a run of the terminal's font.
  function fit() {
    var probe = createElement.call(document, "span");
    probe.textContent = "MMMMMMMMMM";
    probe.style.fontFamily = term.options.fontFamily;
    probe.style.fontSize = term.options.fontSize + "px";
    probe.style.position = "absolute";
    probe.style.visibility = "hidden";
    document.body.appendChild(probe);
    var cell = probe.getBoundingClientRect();
    probe.remove();
    var cols = Math.floor((box.clientWidth - 16) / (cell.width / 10));
    var rows = Math.floor(box.clientHeight / (cell.height || 18));
    if (cols > 0 && rows > 0) {
      term.resize(Math.max(20, cols), Math.max(5, rows));
    }
  }
})();
