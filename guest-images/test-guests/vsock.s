# Test guest: virtio-vsock, both directions (runs on ferrovirt's VMM; QEMU here has no
# vhost-vsock, so there is no QEMU run of this guest).
#
# Stream packets are a 44-byte header (src_cid, dst_cid: u64; src_port, dst_port, len: u32;
# type, op: u16; flags, buf_alloc, fwd_cnt: u32) plus payload. The guest prints:
#   TEST vsock cid <8 hex>
#   TEST vsock connected         guest port 5000 -> host port 1234: REQUEST answered by RESPONSE
#   TEST vsock tx ok             sent RW `FERROVIRT-VSOCK-TX` (18 bytes)
#   TEST vsock rx ok             received RW starting with `FERROVIRT-VSOCK-RX`
#   TEST vsock listening         closed it (SHUTDOWN), now waits for a host REQUEST to port 6000
#   TEST vsock accepted          answered it with RESPONSE
#   TEST vsock echo ok           echoed the first RW it received back to the host
#   TEST vsock ok
# Packets of other kinds in between (credit updates) are skipped, up to 16 at each step.
    .include "common.s"
    .set HOST_CID, 2
    .set OP_REQUEST, 1
    .set OP_RESPONSE, 2
    .set OP_SHUTDOWN, 4
    .set OP_RW, 5
    .set H_SRC_CID, 0
    .set H_DST_CID, 8
    .set H_SRC_PORT, 16
    .set H_DST_PORT, 20
    .set H_LEN, 24
    .set H_TYPE, 28
    .set H_OP, 30
    .set H_FLAGS, 32
    .set H_BUF_ALLOC, 36
    .set H_FWD_CNT, 40
    .set HDR_LEN, 44
    .set RX_LEN, 4096
    .text
main:
    say "ferrovirt test guest: virtio-vsock\n"
    movl $19, %edi
    call virtio_find
    testq %rax, %rax
    jnz 1f
    fail "TEST vsock FAIL no virtio-vsock device found\n"
1:  movq %rax, %rbx
    xorl %edi, %edi
    call virtio_init
    xorl %ecx, %ecx
    movl $rxq, %edx
    call virtio_queue
    movl $1, %ecx
    movl $txq, %edx
    call virtio_queue
    movl $2, %ecx
    movl $evq, %edx
    call virtio_queue
    call virtio_driver_ok
    movl VM_CONFIG(%rbx), %eax
    movl %eax, guest_cid
    say "TEST vsock cid "
    movl guest_cid, %eax
    movl $8, %ecx
    call puthex
    say "\n"
    call post_rx

    # Guest-initiated: connect 5000 -> host 1234.
    movl $OP_REQUEST, %edi
    xorl %esi, %esi
    movl $5000, %edx
    movl $1234, %ecx
    call header
    movl $HDR_LEN, %r8d
    call send_tx
    movl $OP_RESPONSE, %edi
    call rx_wait_op
    say "TEST vsock connected\n"
    call post_rx

    movl $OP_RW, %edi
    movl $18, %esi
    movl $5000, %edx
    movl $1234, %ecx
    call header
    xorl %ecx, %ecx
2:  movb txtext(%rcx), %al
    movb %al, txbuf + HDR_LEN(%rcx)
    incl %ecx
    cmpl $18, %ecx
    jb 2b
    movl $(HDR_LEN + 18), %r8d
    call send_tx
    say "TEST vsock tx ok\n"

    movl $OP_RW, %edi
    call rx_wait_op
    movl rxbuf + H_LEN, %eax
    addl %eax, fwd_cnt
    cmpl $18, %eax
    jb 3f
    movl $rxbuf + HDR_LEN, %esi
    movl $rxtext, %edi
    movl $18, %ecx
    call memeq
    je 4f
3:  fail "TEST vsock FAIL unexpected data from the host\n"
4:  say "TEST vsock rx ok\n"
    call post_rx

    movl $OP_SHUTDOWN, %edi
    xorl %esi, %esi
    movl $5000, %edx
    movl $1234, %ecx
    call header
    movl $3, txbuf + H_FLAGS
    movl $HDR_LEN, %r8d
    call send_tx

    # Host-initiated: wait for a REQUEST to port 6000 and accept it.
    movl $0, fwd_cnt
    say "TEST vsock listening\n"
    movl $OP_REQUEST, %edi
    call rx_wait_op
    cmpl $6000, rxbuf + H_DST_PORT
    je 5f
    fail "TEST vsock FAIL REQUEST for another port\n"
5:  movl rxbuf + H_SRC_PORT, %eax
    movl %eax, host_port
    call post_rx
    movl $OP_RESPONSE, %edi
    xorl %esi, %esi
    movl $6000, %edx
    movl host_port, %ecx
    call header
    movl $HDR_LEN, %r8d
    call send_tx
    say "TEST vsock accepted\n"

    movl $OP_RW, %edi
    call rx_wait_op
    movl rxbuf + H_LEN, %r12d
    addl %r12d, fwd_cnt
    cmpl $1024, %r12d
    jbe 6f
    fail "TEST vsock FAIL echo payload too long\n"
6:  xorl %ecx, %ecx
7:  cmpl %r12d, %ecx
    jae 8f
    movb rxbuf + HDR_LEN(%rcx), %al
    movb %al, txbuf + HDR_LEN(%rcx)
    incl %ecx
    jmp 7b
8:  call post_rx
    movl $OP_RW, %edi
    movl %r12d, %esi
    movl $6000, %edx
    movl host_port, %ecx
    call header
    leal HDR_LEN(%r12d), %r8d
    call send_tx
    say "TEST vsock echo ok\n"
    say "TEST vsock ok\n"
    ret

# header: edi = op, esi = payload length, edx = source (guest) port, ecx = destination port.
header:
    movl guest_cid, %eax
    movq %rax, txbuf + H_SRC_CID
    movq $HOST_CID, txbuf + H_DST_CID
    movl %edx, txbuf + H_SRC_PORT
    movl %ecx, txbuf + H_DST_PORT
    movl %esi, txbuf + H_LEN
    movw $1, txbuf + H_TYPE
    movw %di, txbuf + H_OP
    movl $0, txbuf + H_FLAGS
    movl $RX_LEN, txbuf + H_BUF_ALLOC
    movl fwd_cnt, %eax
    movl %eax, txbuf + H_FWD_CNT
    ret

# send_tx: r8d = packet length. Sends txbuf as one descriptor and waits for it to be used.
send_tx:
    movl $txq, %edx
    xorl %ecx, %ecx
    movl $txbuf, %esi
    xorl %r9d, %r9d
    call vq_desc
    xorl %eax, %eax
    movl $1, %ecx
    call vq_kick
    call vq_wait
    cmpl $-1, %eax
    jne 1f
    fail "TEST vsock FAIL tx timeout\n"
1:  ret

# post_rx: offers rxbuf as descriptor 0 of the RX queue.
post_rx:
    movl $rxq, %edx
    xorl %ecx, %ecx
    movl $rxbuf, %esi
    movl $RX_LEN, %r8d
    movl $VIRTQ_DESC_F_WRITE, %r9d
    call vq_desc
    xorl %eax, %eax
    xorl %ecx, %ecx
    call vq_kick
    ret

# rx_wait_op: edi = op. Waits for a received packet with that op (others are skipped).
rx_wait_op:
    movl %edi, wanted_op
    movl $16, %r13d
1:  movl $rxq, %edx
    call vq_wait
    cmpl $-1, %eax
    jne 2f
    fail "TEST vsock FAIL rx timeout\n"
2:  movzwl rxbuf + H_OP, %eax
    cmpl wanted_op, %eax
    je 3f
    call post_rx
    decl %r13d
    jnz 1b
    fail "TEST vsock FAIL expected packet never came\n"
3:  ret

    .section .rodata
txtext:
    .ascii "FERROVIRT-VSOCK-TX"
rxtext:
    .ascii "FERROVIRT-VSOCK-RX"

    .bss
    .balign 4096
rxq:
    .skip 4096
txq:
    .skip 4096
evq:
    .skip 4096
guest_cid:
    .skip 4
host_port:
    .skip 4
fwd_cnt:
    .skip 4
wanted_op:
    .skip 4
    .balign 16
txbuf:
    .skip HDR_LEN + 1024
    .balign 16
rxbuf:
    .skip RX_LEN
