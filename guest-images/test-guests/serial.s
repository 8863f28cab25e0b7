# Test guest: serial hello. Prints a greeting and `TEST serial ok`, then powers off.
    .include "common.s"
    .text
main:
    say "hello from the ferrovirt serial test guest\n"
    say "TEST serial ok\n"
    ret
