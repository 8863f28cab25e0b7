# Test guest: keeps rewriting a memory pattern and checks it, for live migration tests.
#
# A 4 MiB region at 16 MiB holds one qword per index i: (generation << 32) | i. Generation 0 is
# written first; then, for generation g = 1, 2, ..., one pass over the region checks that every
# qword still holds generation g - 1 and writes generation g, and the guest prints
# `GEN <8 hex digits> ok`. The generation lives in a register, so it travels with the vCPU state.
# A qword that does not hold what the last pass wrote (a page a migration lost or sent stale)
# prints `TEST memtest FAIL gen <g> qword <i> got <value> want <value>` and powers off.
# With a virtio-rng device, each generation also takes 16 bytes from it (`GEN <g> ok rng 10`), so
# a migrated device must go on serving its ring where it stopped; no answer within about 13 s
# prints `TEST memtest FAIL rng timeout` and powers off.
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
    movl $4, %edi
    call virtio_find
    movq %rax, rng_base(%rip)
    testq %rax, %rax
    jz 1f
    movq %rax, %rbx
    xorl %edi, %edi
    call virtio_init
    xorl %ecx, %ecx
    movl $rngq, %edx
    call virtio_queue
    call virtio_driver_ok
    say "TEST memtest uses virtio-rng\n"
1:
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
    say " ok"
    movq rng_base(%rip), %rbx
    testq %rbx, %rbx
    jz 3f
    xorl %ecx, %ecx
    movl $rngq, %edx
    movl $rngbuf, %esi
    movl $16, %r8d
    movl $VIRTQ_DESC_F_WRITE, %r9d
    call vq_desc
    xorl %eax, %eax
    xorl %ecx, %ecx
    call vq_kick
    call vq_wait
    cmpl $-1, %eax
    jne 4f
    say "\nTEST memtest FAIL rng timeout\n"
    ret
4:  movl %eax, %r15d
    say " rng "
    movl %r15d, %eax
    movl $2, %ecx
    call puthex
3:  say "\n"
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

    .data
rng_base:
    .quad 0

    .bss
    .balign 4096
rngq:
    .skip 4096
rngbuf:
    .skip 64
