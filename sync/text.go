package sync

import (
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"
)

// maxMessageLength bounds status and condition messages: they quote user input and kubelet text,
// and a status must stay far below the API server's object size limit.
const maxMessageLength = 1024

// StatusMessage is message as a status may show it: inert, at most the length of a message.
func StatusMessage(message string) string { return inert(message, maxMessageLength) }

// inert makes text fit to show anywhere status is read (a terminal, a platform's web page), cut to
// at most n bytes: control characters become spaces and angle brackets become look-alikes, so that
// no markup or terminal escape passes through.
func inert(s string, n int) string {
	s = strings.Map(func(r rune) rune {
		switch {
		case r == '<':
			return '‹'
		case r == '>':
			return '›'
		case unicode.IsControl(r), r == utf8.RuneError:
			return ' '
		}
		return r
	}, s)
	return truncate(s, n)
}

// truncate cuts s to at most n bytes without splitting a UTF-8 character, marking the cut.
func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	const mark = "..."
	cut := n - len(mark)
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + mark
}

// maxObservedLength bounds each piece of text the hook quotes from an observed object.
const maxObservedLength = 256

// detail appends a message from the kubelet, the scheduler or a Gateway when there is one,
// bounded and inert.
func detail(message string) string {
	message = strings.TrimSuffix(strings.TrimSpace(message), ".")
	if message == "" {
		return ""
	}
	return ": " + inert(message, maxObservedLength)
}

func itoa(n int32) string { return strconv.Itoa(int(n)) }
