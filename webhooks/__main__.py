from webhooks.service.cli import main

main()
