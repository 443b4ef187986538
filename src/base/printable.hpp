// The one escaping of text that came from a file, a path or a variable before it enters a
// message: a NUL would cut the message short where it is read as a C string (the C API's
// last error, Python's exception text), and control characters (escape sequences) would reach
// the terminal raw, retitling or clearing it.
#pragma once

#include <string>
#include <string_view>

namespace mxmoe {

// TEXT with every byte below 0x20 and 0x7f written as \xNN ("\x00", "\x1b"), and the
// backslash as itself: printable bytes and UTF-8 sequences are kept.
std::string printable(std::string_view text);
// The same for a whole message as it leaves mxmoe (the command line's stderr, the C API's last
// error): line breaks are kept, every other control byte escaped. The last line of defence for
// text that entered a message unescaped (a flag's value echoed by the parser).
std::string printable_message(std::string_view text);
// For text that must be ASCII and is logged (an HTTP request's target): every byte outside
// 0x20-0x7e, and the backslash, as \xNN. Nothing raw above 0x7e reaches the log, neither a C1
// control (0x9b is CSI on an 8-bit terminal; U+009B is CSI to some UTF-8 ones) nor bytes
// that are not UTF-8, and an escape in the text cannot pass for one made here.
std::string printable_ascii(std::string_view text);

}  // namespace mxmoe
