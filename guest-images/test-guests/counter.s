# Test guest: counter printer, for pause/resume and graceful shutdown tests.
#
# Prints `COUNT <8 hex digits>` lines, one about every 2^27 TSC cycles, counting up from 0.
# Between lines it polls the i8042 status port: when the controller has a byte for the guest
# (the VMM's ctrl-alt-del request for a graceful shutdown) it prints
# `TEST counter shutdown requested` and powers off (a status of 0xff means no controller). After COUNT 0x10000 it powers off by itself.
    .include "common.s"
    .text
main:
    say "TEST counter start\n"
    xorl %r12d, %r12d
1:  say "COUNT "
    movq %r12, %rax
    movl $8, %ecx
    call puthex
    say "\n"
    incq %r12
    cmpq $0x10000, %r12
    ja 9f
    inb $0x64, %al
    cmpb $0xff, %al             # no i8042 here (QEMU microvm): nothing to poll
    je 3f
    testb $1, %al
    jnz 8f
3:      rdtsc
    shlq $32, %rdx
    orq %rax, %rdx
    leaq 0x8000000(%rdx), %r13
2:  pause
    rdtsc
    shlq $32, %rdx
    orq %rax, %rdx
    cmpq %r13, %rdx
    jb 2b
    jmp 1b
8:  inb $0x60, %al
    say "TEST counter shutdown requested\n"
9:  ret
