# Test guest: keeps rewriting a memory pattern and checks it, for live migration tests.
#
# A 4 MiB region at 16 MiB holds one qword per index i: (generation << 32) | i. Generation 0 is
# written first; then, for generation g = 1, 2, ..., one pass over the region checks that every
# qword still holds generation g - 1 and writes generation g, and the guest prints
# `GEN <8 hex digits> ok`. The generation lives in a register, so it travels with the vCPU state.
# A qword that does not hold what the last pass wrote (a page a migration lost or sent stale)
# prints `TEST memtest FAIL gen <g> qword <i> got <value> want <value>` and powers off.
# Between generations it polls the i8042 like `counter`: a byte for the guest (the VMM's
# ctrl-alt-del) prints `TEST memtest shutdown requested` and powers off. After generation
# 0x100000 it powers off by itself.
    .include "common.s"
    .set REGION, 0x1000000
    .set REGION_QWORDS, (4 << 20) / 8
    .set LAST_GEN, 0x100000
    .text
main:
    say "TEST memtest start\n"
    # Generation 0.
    movl $REGION, %edi
    xorl %ecx, %ecx
1:  movq %rcx, (%rdi,%rcx,8)
    incq %rcx
    cmpq $REGION_QWORDS, %rcx
    jb 1b
    xorl %r12d, %r12d
gen:
    incq %r12
    leaq -1(%r12), %r13
    shlq $32, %r13                      # r13: the previous generation's high half
    movq %r12, %r14
    shlq $32, %r14                      # r14: this generation's high half
    movl $REGION, %edi
    xorl %ecx, %ecx
2:  leaq (%r13,%rcx), %r15
    cmpq %r15, (%rdi,%rcx,8)
    jne bad
    leaq (%r14,%rcx), %rax
    movq %rax, (%rdi,%rcx,8)
    incq %rcx
    cmpq $REGION_QWORDS, %rcx
    jb 2b
    say "GEN "
    movq %r12, %rax
    movl $8, %ecx
    call puthex
    say " ok\n"
    cmpq $LAST_GEN, %r12
    jae 9f
    inb $0x64, %al
    cmpb $0xff, %al                     # no i8042 here (QEMU microvm): nothing to poll
    je gen
    testb $1, %al
    jz gen
    inb $0x60, %al
    say "TEST memtest shutdown requested\n"
9:  ret

bad:
    movq %rcx, %rbx                     # index
    movq (%rdi,%rcx,8), %rbp            # what the qword holds
    say "TEST memtest FAIL gen "
    movq %r12, %rax
    movl $8, %ecx
    call puthex
    say " qword "
    movq %rbx, %rax
    movl $8, %ecx
    call puthex
    say " got "
    movq %rbp, %rax
    movl $16, %ecx
    call puthex
    say " want "
    movq %r15, %rax
    movl $16, %ecx
    call puthex
    say "\n"
    ret
