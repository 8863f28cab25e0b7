# Test guest: virtio-rng. Reads 16 bytes from the entropy queue and prints them:
# `TEST rng bytes <hex>`, then `TEST rng ok` if the device filled the buffer with something
# other than zeros.
    .include "common.s"
    .set RNG_LEN, 16
    .text
main:
    say "ferrovirt test guest: virtio-rng\n"
    movl $4, %edi
    call virtio_find
    testq %rax, %rax
    jnz 1f
    fail "TEST rng FAIL no virtio-rng device found\n"
1:  movq %rax, %rbx
    xorl %edi, %edi
    call virtio_init
    xorl %ecx, %ecx
    movl $rngq, %edx
    call virtio_queue
    call virtio_driver_ok
    xorl %ecx, %ecx
    movl $rngbuf, %esi
    movl $RNG_LEN, %r8d
    movl $VIRTQ_DESC_F_WRITE, %r9d
    call vq_desc
    xorl %eax, %eax
    xorl %ecx, %ecx
    call vq_kick
    call vq_wait
    cmpl $-1, %eax
    jne 2f
    fail "TEST rng FAIL timeout\n"
2:  cmpl $RNG_LEN, %eax
    je 3f
    fail "TEST rng FAIL short read\n"
3:  say "TEST rng bytes "
    xorl %r12d, %r12d
    xorl %r13d, %r13d
4:  movzbl rngbuf(%r12), %eax
    orl %eax, %r13d
    movl $2, %ecx
    call puthex
    incl %r12d
    cmpl $RNG_LEN, %r12d
    jb 4b
    say "\n"
    testl %r13d, %r13d
    jnz 5f
    fail "TEST rng FAIL all zero\n"
5:  say "TEST rng ok\n"
    ret

    .bss
    .balign 4096
rngq:
    .skip 4096
rngbuf:
    .skip 64
